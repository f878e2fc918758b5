// Creating a sandbox, running a command in it, and destroying it without leftovers, also when its
// PID 1 died half-way through its own teardown of an exec.
#include <gtest/gtest.h>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <optional>
#include <thread>

#include "maf_sandbox/runtime/kernel/cgroup.hpp"
#include "maf_sandbox/runtime/kernel/kernel_files.hpp"
#include "polling.hpp"

#include "sandbox_fixture.hpp"

namespace maf_sandbox::runtime::testing {
namespace {

TEST(SandboxLifecycle, CreateExecTrueAndDestroyLeavesNothing) {
    StateDir state;
    auto launch = host_launch(state.path(), unique_id());
    SandboxHandle handle;
    {
        ScopedSandbox sandbox(launch);
        handle = sandbox.handle();
        ExecCall call;
        call.command = std::vector<std::string>{"true"};
        const ExecReply reply = exec_in_sandbox(handle, call);
        EXPECT_EQ(reply.status, ExecStatus::exited) << reply.message;
        EXPECT_EQ(reply.exit_code, 0) << reply.stderr_head;
        const ExecReply hello = sandbox.sh("echo hello; echo oops >&2; exit 3");
        EXPECT_EQ(hello.stdout_head, "hello\n");
        EXPECT_EQ(hello.stderr_head, "oops\n");
        EXPECT_EQ(hello.exit_code, 3);
    }
    EXPECT_FALSE(sandbox_alive(handle));
    for (const auto& cgroup : handle.cgroups) {
        EXPECT_FALSE(std::filesystem::exists(cgroup)) << cgroup;
    }
    EXPECT_FALSE(std::filesystem::exists(handle.sandbox_dir));
}

// The exec child cgroup of the freezer hierarchy that holds a process, once one does.
std::optional<std::filesystem::path> busy_exec_freezer_child(const SandboxHandle& handle) {
    namespace fs = std::filesystem;
    for (const auto& top : handle.cgroups) {
        if (!fs::exists(top / "freezer.state")) {
            continue;
        }
        for (int attempt = 0; attempt < 3000; ++attempt) {
            std::error_code ec;
            for (const auto& entry : fs::directory_iterator(top, ec)) {
                if (entry.is_directory() && entry.path().filename().string().starts_with("exec-") &&
                    !read_kernel_file(entry.path() / "cgroup.procs").value_or("").empty()) {
                    return entry.path();
                }
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(10));
        }
    }
    return std::nullopt;
}

// The supervisor freezes an exec's own freezer cgroup to kill its tree, then thaws it. If PID 1
// dies between the two writes, the child stays self-frozen and a SIGKILL sent into it never lands:
// the host's teardown must still reclaim everything.
TEST(SandboxLifecycle, AnExecCgroupLeftFrozenByADeadPid1IsStillReclaimed) {
    StateDir state;
    auto launch = host_launch(state.path(), unique_id());
    SandboxHandle handle;
    {
        ScopedSandbox sandbox(launch);
        handle = sandbox.handle();
        if (handle.cgroup_layout != CgroupLayout::v1) {
            GTEST_SKIP() << "only the v1 freezer keeps a child frozen under a thawed parent";
        }
        std::thread exec([&] {
            try {
                sandbox.sh("sleep 60", std::chrono::seconds(90));
            } catch (const std::exception&) {
                // PID 1 is killed under it: the exec fails, which is expected.
            }
        });
        const auto child = busy_exec_freezer_child(handle);
        ASSERT_TRUE(child.has_value()) << "the exec's sleep never appeared in a freezer child";
        std::ofstream(*child / "freezer.state") << "FROZEN";
        ASSERT_EQ(::kill(handle.pid, SIGKILL), 0);
        // The frozen exec handler holds the exec's connection open until the teardown thaws it.
        EXPECT_NO_THROW(destroy_sandbox(handle));  // throws if anything survived SIGKILL
        exec.join();
        EXPECT_FALSE(sandbox_alive(handle));
        for (const auto& cgroup : handle.cgroups) {
            EXPECT_FALSE(std::filesystem::exists(cgroup)) << cgroup;
        }
    }
}

// A paused sandbox (its whole cgroup frozen, as the emulator's stop does) is destroyed without
// waiting out PID 1's grace: a v1 freezer holds even SIGKILL, so the teardown thaws it first. The
// control is the same sandbox frozen and thawed again: it starts exec'ing, proving the freeze took.
TEST(SandboxLifecycle, DestroyingAFrozenSandboxDoesNotWaitOutPid1sGrace) {
    StateDir state;
    auto launch = host_launch(state.path(), unique_id());
    ScopedSandbox sandbox(launch);
    const SandboxHandle handle = sandbox.handle();
    auto cgroup = SandboxCgroup::attach(handle.cgroup_layout, handle.cgroups);
    cgroup->freeze(true);
    cgroup->freeze(false);
    EXPECT_EQ(sandbox.sh("echo thawed").stdout_head, "thawed\n");

    cgroup->freeze(true);
    std::atomic<bool> done{false};
    std::thread destroyer([&] {
        try {
            destroy_sandbox(handle);
        } catch (const std::exception& e) {
            ADD_FAILURE() << "destroy_sandbox: " << e.what();
        }
        done = true;
    });
    // PID 1's grace is 5 s; well under it, however loaded the machine.
    EXPECT_TRUE(maf_sandbox::testing::poll_until([&] { return done.load(); },
                                                 std::chrono::milliseconds(4000)))
        << "destroying a frozen sandbox waited out PID 1's grace";
    destroyer.join();
    EXPECT_FALSE(sandbox_alive(handle));
    for (const auto& path : handle.cgroups) {
        EXPECT_FALSE(std::filesystem::exists(path)) << path;
    }
}

}  // namespace
}  // namespace maf_sandbox::runtime::testing
