// The host-wide claim table (id_claims.hpp) in a private directory: slots, release, admission and
// the lock that tells a live claim from one whose sandbox is gone.
#include "maf_sandbox/runtime/wire/id_claims.hpp"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "maf_sandbox/core/errors.hpp"

namespace maf_sandbox::runtime {
namespace {

namespace fs = std::filesystem;

class ClaimTable : public ::testing::Test {
  protected:
    ClaimTable() {
        std::string pattern = (fs::temp_directory_path() / "maf-idclaims-XXXXXX").string();
        if (::mkdtemp(pattern.data()) == nullptr) {
            throw std::runtime_error("mkdtemp");
        }
        root_ = pattern;
    }
    ~ClaimTable() override {
        std::error_code ignored;
        fs::remove_all(root_, ignored);
    }
    IdClaims table() const { return IdClaims(root_ / "ids"); }
    std::size_t files() const {
        std::size_t n = 0;
        for (const auto& entry : fs::directory_iterator(root_ / "ids")) {
            n += entry.path().filename() != ".lock";
        }
        return n;
    }
    static IdClaimRequest request(const std::string& id, std::uint64_t pids = 512,
                                  std::uint64_t budget = 0) {
        return IdClaimRequest{id, kFullGuestIdCount, pids, budget, {}};
    }

    fs::path root_;
    IdPool pool_ = IdPool::parse(kDefaultIdPoolText);
};

TEST_F(ClaimTable, TwoSandboxesGetDisjointSlotsTheLowestFirst) {
    auto first = table().claim(pool_, request("aaaa"));
    auto second = table().claim(pool_, request("bbbb"));
    EXPECT_EQ(first.ids().host_base, 0x70000000u);
    EXPECT_EQ(second.ids().host_base, 0x70000000u + first.ids().span());
    EXPECT_EQ(files(), 2u);
    const auto entries = table().list();
    ASSERT_EQ(entries.size(), 2u);
    EXPECT_EQ(entries[0].sandbox_id, "aaaa");
    EXPECT_EQ(entries[0].range, (IdRange{0x70000000u, 65536 + kServiceIdCount}));
    EXPECT_EQ(entries[0].pids, 512u);
    EXPECT_TRUE(entries[0].live);
    EXPECT_TRUE(entries[1].live);
}

TEST_F(ClaimTable, AnUncommittedClaimIsReleasedWhenItGoes) {
    { auto claim = table().claim(pool_, request("aaaa")); }
    EXPECT_EQ(files(), 0u);
    auto again = table().claim(pool_, request("bbbb"));
    EXPECT_EQ(again.ids().host_base, 0x70000000u);
}

TEST_F(ClaimTable, ACommittedClaimStaysUntilReleasedAndItsSlotIsThenReused) {
    uid_t base = 0;
    {
        auto claim = table().claim(pool_, request("aaaa"));
        base = claim.ids().host_base;
        claim.commit();
    }
    EXPECT_EQ(files(), 1u);
    auto next = table().claim(pool_, request("bbbb"));
    EXPECT_NE(next.ids().host_base, base);
    table().release(base, "someone-else");  // names another sandbox: kept
    EXPECT_EQ(files(), 2u);
    table().release(base, "aaaa");
    EXPECT_EQ(files(), 1u);
    auto reused = table().claim(pool_, request("cccc"));
    EXPECT_EQ(reused.ids().host_base, base);
}

TEST_F(ClaimTable, AdmissionRefusesPastThePidBudgetWithATypedError) {
    auto first = table().claim(pool_, request("aaaa", 512, 1200));
    auto second = table().claim(pool_, request("bbbb", 512, 1200));
    EXPECT_THROW(table().claim(pool_, request("cccc", 512, 1200)), SandboxCapacityExceeded);
    EXPECT_EQ(files(), 2u);  // the refusal left nothing behind
    // A smaller one still fits, and no limit at all is charged as the whole budget.
    EXPECT_NO_THROW(table().claim(pool_, request("dddd", 100, 1200)));
    EXPECT_THROW(table().claim(pool_, request("eeee", 0, 1200)), SandboxCapacityExceeded);
}

TEST_F(ClaimTable, ClaimsWhoseLockNobodyHoldsDoNotCountAgainstTheBudget) {
    {
        auto gone = table().claim(pool_, request("aaaa", 1000, 1200));
        gone.commit();  // then its lock closes: the sandbox it stood for is gone
    }
    auto live = table().claim(pool_, request("bbbb", 1000, 1200));
    EXPECT_NE(live.ids().host_base, 0x70000000u);  // the stale slot is not handed out again
    EXPECT_THROW(table().claim(pool_, request("cccc", 1000, 1200)), SandboxCapacityExceeded);
}

TEST_F(ClaimTable, AClaimIsLiveWhileAnyProcessHoldsItsLock) {
    auto claim = table().claim(pool_, request("aaaa"));
    int pipe_fds[2];
    ASSERT_EQ(::pipe(pipe_fds), 0);
    const pid_t child = ::fork();
    if (child == 0) {
        // As PID 1 of a sandbox does: holds the inherited descriptor until it ends.
        ::close(pipe_fds[1]);
        char byte;
        [[maybe_unused]] auto n = ::read(pipe_fds[0], &byte, 1);
        ::_exit(0);
    }
    ::close(pipe_fds[0]);
    claim.commit();
    claim = IdClaim{};  // the creator lets go
    EXPECT_TRUE(table().list().at(0).live);
    EXPECT_TRUE(table().reclaim_stale().empty());
    ::close(pipe_fds[1]);
    ::waitpid(child, nullptr, 0);
    EXPECT_FALSE(table().list().at(0).live);
    std::vector<std::string> cleaned;
    const auto reclaimed =
        table().reclaim_stale([&](const std::string& id) { cleaned.push_back(id); });
    EXPECT_EQ(reclaimed, std::vector<std::string>{"aaaa"});
    EXPECT_EQ(cleaned, std::vector<std::string>{"aaaa"});
    EXPECT_EQ(files(), 0u);
}

TEST_F(ClaimTable, AFullPoolIsATypedRefusal) {
    const auto small = IdPool::parse("0x70000000:140000");  // two slots
    auto a = table().claim(small, request("aaaa"));
    auto b = table().claim(small, request("bbbb"));
    EXPECT_THROW(table().claim(small, request("cccc")), SandboxCapacityExceeded);
}

TEST_F(ClaimTable, AFullPoolTakesBackTheSlotsOfClaimsNobodyHolds) {
    const auto small = IdPool::parse("0x70000000:140000");  // two slots
    auto live = table().claim(small, request("aaaa"));
    {
        auto gone = table().claim(small, request("bbbb"));
        gone.commit();  // then its lock closes: a sandbox killed with nobody to release its claim
    }
    std::vector<std::string> emptied;
    auto ask = request("cccc");
    ask.empty_sandbox = [&](const std::string& id) { emptied.push_back(id); };
    auto next = table().claim(small, ask);
    EXPECT_EQ(next.ids().host_base, 0x70000000u + live.ids().span());
    EXPECT_EQ(emptied, std::vector<std::string>{"bbbb"}) << "only the unheld claim is emptied";
    const auto entries = table().list();
    ASSERT_EQ(entries.size(), 2u);
    EXPECT_EQ(entries[0].sandbox_id, "aaaa");
    EXPECT_EQ(entries[1].sandbox_id, "cccc");
    // Control: a claim someone holds is never taken back.
    ask.sandbox_id = "dddd";
    EXPECT_THROW(table().claim(small, ask), SandboxCapacityExceeded);
}

TEST_F(ClaimTable, ClaimsFromAnotherPoolSettingAreNeverOverlapped) {
    auto other = table().claim(IdPool::parse("0x70008000:65538"), request("aaaa"));
    auto mine = table().claim(pool_, request("bbbb"));
    EXPECT_GE(mine.ids().host_base, other.ids().host_base + other.ids().span());
}

TEST_F(ClaimTable, ABadSandboxIdNamesNoClaim) {
    EXPECT_THROW(table().claim(pool_, request("")), InvalidArgument);
    EXPECT_THROW(table().claim(pool_, request("a/b")), InvalidArgument);
    EXPECT_THROW(table().claim(pool_, request("a\nb")), InvalidArgument);
}

}  // namespace
}  // namespace maf_sandbox::runtime
