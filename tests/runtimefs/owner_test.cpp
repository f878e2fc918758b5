// Co-owners of a sandbox (runtime/wire/owner.hpp): the record's owner list, read with the one
// owner older records carry, kept free of owners that ended, and gc's "orphaned" only once every
// owner is gone.
#include "maf_sandbox/runtime/wire/owner.hpp"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "maf_sandbox/runtime/wire/registry.hpp"

namespace maf_sandbox::runtime {
namespace {

// A process that has ended: this process's pid with a start time it never had.
SandboxOwner ended_owner() {
    auto owner = current_process_as_owner();
    owner.start_time += 12345;
    return owner;
}

// A live process other than this one, ended by the destructor.
struct Child {
    pid_t pid = ::fork();
    Child() {
        if (pid == 0) {
            ::pause();
            ::_exit(0);
        }
    }
    ~Child() {
        ::kill(pid, SIGKILL);
        ::waitpid(pid, nullptr, 0);
    }
    SandboxOwner owner() const { return {pid, *process_start_time(pid)}; }
};

TEST(SandboxOwners, AnOlderRecordsOneOwnerIsReadAsTheOnlyOwner) {
    SandboxRecord record;
    EXPECT_TRUE(recorded_owners(record).empty());
    EXPECT_FALSE(owner_gone(record));
    const auto self = current_process_as_owner();
    record.runtime["owner"] = to_json(self);
    EXPECT_EQ(recorded_owners(record), std::vector<SandboxOwner>{self});
}

TEST(SandboxOwners, AddingACoOwnerKeepsTheFirstAndDropsOwnersThatEnded) {
    const Child other;
    SandboxRecord record;
    set_recorded_owner(record, ended_owner());
    const auto self = current_process_as_owner();
    ASSERT_TRUE(add_recorded_owner(record, other.owner()));
    ASSERT_TRUE(add_recorded_owner(record, self));
    ASSERT_TRUE(add_recorded_owner(record, self));  // named once
    EXPECT_EQ(recorded_owners(record), (std::vector<SandboxOwner>{other.owner(), self}));
    EXPECT_EQ(recorded_owner(record), other.owner());  // mirrored for one-owner readers
}

TEST(SandboxOwners, RemovingAnOwnerSaysHowManyLiveOnesRemain) {
    const Child other;
    SandboxRecord record;
    const auto self = current_process_as_owner();
    add_recorded_owner(record, self);
    add_recorded_owner(record, other.owner());
    EXPECT_EQ(remove_recorded_owner(record, self), 1u);
    EXPECT_EQ(recorded_owners(record), std::vector<SandboxOwner>{other.owner()});
    EXPECT_EQ(remove_recorded_owner(record, other.owner()), 0u);
    EXPECT_TRUE(recorded_owners(record).empty());
}

TEST(SandboxOwners, ASandboxIsOrphanedOnlyWhenEveryOwnerHasEnded) {
    SandboxRecord record;
    set_recorded_owner(record, ended_owner());
    EXPECT_TRUE(owner_gone(record));
    {
        const Child other;
        record.runtime["owners"] =
            boost::json::array{to_json(ended_owner()), to_json(other.owner())};
        EXPECT_FALSE(owner_gone(record)) << "a co-owner still runs";
    }
    EXPECT_TRUE(owner_gone(record)) << "the co-owner has ended too";
}

}  // namespace
}  // namespace maf_sandbox::runtime
