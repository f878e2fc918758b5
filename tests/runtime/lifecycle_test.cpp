// Creating a sandbox, running a command in it, and destroying it without leftovers.
#include <gtest/gtest.h>
#include <signal.h>

#include <filesystem>

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

}  // namespace
}  // namespace maf_sandbox::runtime::testing
