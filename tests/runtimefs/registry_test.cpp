#include "maf_sandbox/runtime/wire/registry.hpp"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <fstream>
#include <thread>
#include <vector>

#include "maf_sandbox/core/errors.hpp"
#include "temp_dir.hpp"

namespace maf_sandbox::runtime {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;

SandboxRecord sample_record(std::map<std::string, std::string> labels = {{"scope", "s1"},
                                                                         {"thread", "t1"}}) {
    SandboxRecord record;
    record.id = Registry::new_id();
    record.labels = std::move(labels);
    record.image = "host:latest";
    record.limits = ResourceLimits{1 << 30, 512, 1.0, 2ull << 30};
    record.runtime["cgroup_paths"] = boost::json::array{"/sys/fs/cgroup/pids/x"};
    record.created_at = Clock::now();
    record.last_used_at = record.created_at;
    record.lifecycle.idle_timeout = std::chrono::seconds(600);
    return record;
}

// A pid that existed and is gone: fork a child and reap it.
pid_t dead_pid() {
    const pid_t child = ::fork();
    if (child == 0) {
        ::_exit(0);
    }
    ::waitpid(child, nullptr, 0);
    return child;
}

TEST(RegistryTest, RecordsRoundTripThroughCreateGetUpdateListAndRemove) {
    TempDir temp;
    Registry registry(temp.path() / "state");
    auto record = sample_record();
    registry.create(record);
    EXPECT_TRUE(fs::is_directory(registry.sandbox_dir(record.id)));
    auto loaded = registry.get(record.id);
    ASSERT_TRUE(loaded);
    EXPECT_EQ(loaded->labels, record.labels);
    EXPECT_EQ(loaded->limits, record.limits);
    EXPECT_EQ(loaded->runtime, record.runtime);
    EXPECT_EQ(loaded->lifecycle, record.lifecycle);
    EXPECT_EQ(std::chrono::duration_cast<std::chrono::milliseconds>(loaded->created_at -
                                                                    record.created_at)
                  .count(),
              0);
    EXPECT_THROW(registry.create(record), InvalidArgument);

    record.state = SandboxState::running;
    record.supervisor = SupervisorRef{::getpid(), *process_start_time(::getpid())};
    registry.update(record);
    EXPECT_EQ(registry.get(record.id)->state, SandboxState::running);
    EXPECT_EQ(registry.list().size(), 1u);

    registry.remove(record.id);
    EXPECT_EQ(registry.get(record.id), std::nullopt);
    EXPECT_FALSE(fs::exists(registry.sandbox_dir(record.id)));
    EXPECT_NO_THROW(registry.remove(record.id));
    EXPECT_THROW(registry.update(record), InvalidArgument);
}

TEST(RegistryTest, TheSandboxsHostIdRangeRoundTrips) {
    TempDir temp;
    Registry registry(temp.path() / "state");
    auto record = sample_record();
    EXPECT_FALSE(registry.get(record.id).has_value() && registry.get(record.id)->host_ids);
    registry.create(record);
    EXPECT_FALSE(registry.get(record.id)->host_ids);  // none until the launch claims one
    record.host_ids = SandboxRecord::HostIds{0x70000000u + 65538u, 65536, "/run/maf-sandbox/ids"};
    registry.update(record);
    EXPECT_EQ(registry.get(record.id)->host_ids, record.host_ids);
    EXPECT_EQ(registry.list().at(0).host_ids, record.host_ids);
}

TEST(RegistryTest, AStaleTemporaryFileFromACrashIsIgnored) {
    TempDir temp;
    Registry registry(temp.path());
    auto record = sample_record();
    registry.create(record);
    // A crash mid-write leaves a temporary sibling; the record itself is whole.
    std::ofstream(registry.sandbox_dir(record.id) / ".record.json.tmp-deadbeef") << "{\"id\":";
    // A crash before the first record leaves a directory holding only a temporary file.
    const auto orphan = Registry::new_id();
    fs::create_directories(registry.sandbox_dir(orphan));
    std::ofstream(registry.sandbox_dir(orphan) / ".record.json.tmp-0000") << "garbage";
    ASSERT_TRUE(registry.get(record.id));
    EXPECT_EQ(registry.get(orphan), std::nullopt);
    const auto all = registry.list();
    ASSERT_EQ(all.size(), 1u);
    EXPECT_EQ(all[0].id, record.id);
}

TEST(RegistryTest, ListFiltersByLabelSelector) {
    TempDir temp;
    Registry registry(temp.path());
    registry.create(sample_record({{"scope", "a"}, {"thread", "1"}, {"kind", "shell"}}));
    registry.create(sample_record({{"scope", "a"}, {"thread", "2"}}));
    registry.create(sample_record({{"scope", "b"}, {"thread", "1"}}));
    EXPECT_EQ(registry.list(LabelSelector::parse("scope=a")).size(), 2u);
    EXPECT_EQ(registry.list(LabelSelector::parse("scope=a, thread=1")).size(), 1u);
    EXPECT_EQ(registry.list(LabelSelector::parse(std::vector<std::string>{"thread=1"})).size(), 2u);
    EXPECT_EQ(registry.list(LabelSelector::parse("scope=c")).size(), 0u);
    EXPECT_EQ(registry.list(LabelSelector::parse("kind=")).size(), 0u);
}

TEST(RegistryTest, BadSelectorsAreRefusedNamingTheProblem) {
    const auto refused = [](std::string_view text, std::string_view says) {
        try {
            LabelSelector::parse(text);
            ADD_FAILURE() << "accepted '" << text << "'";
        } catch (const InvalidArgument& e) {
            EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
        }
    };
    refused("scope", "no '='");
    refused("=x", "empty key");
    refused("scope=a b", "not valid");
    refused("sc ope=a", "not valid");
    refused("scope=a,,thread=b", "empty item");
    refused("scope=a,scope=b", "twice");
    refused("scope!=a", "'!='");
    refused("", "empty");
    refused(std::string("k=") + std::string(64, 'v'), "at most 63");
    EXPECT_THROW(LabelSelector::parse(std::vector<std::string>{}), InvalidArgument);
}

TEST(RegistryTest, IdsAreRandomHexAndValidated) {
    const auto a = Registry::new_id();
    const auto b = Registry::new_id();
    EXPECT_EQ(a.size(), 32u);
    EXPECT_NE(a, b);
    EXPECT_NO_THROW(Registry::validate_id(a));
    EXPECT_THROW(Registry::validate_id("../etc"), InvalidArgument);
    EXPECT_THROW(Registry::validate_id("ABCDEF0123456789"), InvalidArgument);
    TempDir temp;
    Registry registry(temp.path());
    EXPECT_THROW(registry.sandbox_dir("../../x"), InvalidArgument);
}

TEST(RegistryTest, LivenessNeedsTheSamePidAndStartTime) {
    auto record = sample_record();
    const auto start = process_start_time(::getpid());
    ASSERT_TRUE(start);
    record.supervisor = SupervisorRef{::getpid(), *start};
    EXPECT_TRUE(Registry::is_alive(record));
    record.supervisor.start_time = *start + 1;  // the pid was reused by another process
    EXPECT_FALSE(Registry::is_alive(record));
    record.supervisor = SupervisorRef{dead_pid(), *start};
    EXPECT_FALSE(Registry::is_alive(record));
    record.supervisor = SupervisorRef{};
    EXPECT_FALSE(Registry::is_alive(record));
}

TEST(RegistryTest, LifecycleExpiresOnIdleTimeoutOrMaxLifetime) {
    auto record = sample_record();
    const auto now = Clock::now();
    record.created_at = now - std::chrono::seconds(100);
    record.last_used_at = now - std::chrono::seconds(10);
    record.lifecycle = LifecyclePolicy{std::chrono::seconds(60), std::chrono::seconds(1000)};
    EXPECT_FALSE(lifecycle_expired(record, now));
    record.lifecycle.idle_timeout = std::chrono::seconds(5);
    EXPECT_TRUE(lifecycle_expired(record, now));
    record.lifecycle = LifecyclePolicy{std::nullopt, std::chrono::seconds(50)};
    EXPECT_TRUE(lifecycle_expired(record, now));
}

TEST(RegistryTest, AKeyLockSerialisesTwoProcesses) {
    TempDir temp;
    Registry registry(temp.path());
    int to_child[2];
    int to_parent[2];
    ASSERT_EQ(::pipe(to_child), 0);
    ASSERT_EQ(::pipe(to_parent), 0);
    const std::string key = "scope=a/thread=1/kind=shell";
    // Fork before locking: a forked child would otherwise share the parent's lock.
    const pid_t child = ::fork();
    if (child == 0) {
        Registry mine(temp.path());
        char byte = 0;
        (void)::read(to_child[0], &byte, 1);  // the parent holds the lock now
        int status = mine.try_lock(key).held() ? 10 : 0;
        status |= mine.try_lock("another key").held() ? 0 : 20;
        (void)::write(to_parent[1], &byte, 1);
        status |= mine.lock(key).held() ? 0 : 40;  // blocks until the parent releases
        ::_exit(status);
    }
    auto held = registry.lock(key);
    ASSERT_TRUE(held.held());
    char byte = 'l';
    ASSERT_EQ(::write(to_child[1], &byte, 1), 1);
    ASSERT_EQ(::read(to_parent[0], &byte, 1), 1);
    held = KeyLock{};  // release
    int status = 0;
    ASSERT_EQ(::waitpid(child, &status, 0), child);
    ASSERT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), 0);
    for (int fd : {to_child[0], to_child[1], to_parent[0], to_parent[1]}) {
        ::close(fd);
    }
}

TEST(RegistryTest, ReleasedLocksLeaveNoLockFilesAndStayExclusiveAcrossTheRemoval) {
    TempDir temp;
    Registry registry(temp.path());
    for (int i = 0; i < 100; ++i) {
        auto held = registry.lock("scope=s/thread=t/kind=shell/call=" + std::to_string(i));
        ASSERT_TRUE(held.held());
    }
    EXPECT_TRUE(fs::is_empty(temp.path() / "locks")) << "one-off keys left lock files behind";

    // Many threads contending for one key (each cycle removes the file): never two inside.
    std::atomic<int> inside{0};
    std::atomic<bool> overlap{false};
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t) {
        threads.emplace_back([&] {
            Registry mine(temp.path());
            for (int i = 0; i < 200; ++i) {
                auto held = mine.lock("contended");
                if (inside.fetch_add(1) != 0) {
                    overlap = true;
                }
                std::this_thread::yield();
                inside.fetch_sub(1);
            }
        });
    }
    for (auto& thread : threads) {
        thread.join();
    }
    EXPECT_FALSE(overlap) << "two holders of one key at once";
    EXPECT_TRUE(fs::is_empty(temp.path() / "locks"));
}

TEST(RegistryTest, StateDirComesFromTheEnvironment) {
    ::setenv(kStateDirEnv, "/tmp/maf-state-from-env", 1);
    EXPECT_EQ(default_state_dir(), fs::path("/tmp/maf-state-from-env"));
    ::unsetenv(kStateDirEnv);
    EXPECT_EQ(default_state_dir(), fs::path(kDefaultStateDir));
}

}  // namespace
}  // namespace maf_sandbox::runtime
