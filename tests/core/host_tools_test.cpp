#include "maf_sandbox/core/host_tools_over_exec.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "host_shell_sandbox.hpp"
#include "maf_sandbox/core/errors.hpp"
#include "maf_sandbox/core/run_blocking.hpp"

namespace maf_sandbox {
namespace {

namespace fs = std::filesystem;
using testing::HostShellSandbox;

// Alive means running: a killed process that nobody has reaped yet is a zombie, and dead.
bool alive(pid_t pid) {
    // Streamed, not iterated: a process exiting mid-read gives a short text, not an exception.
    std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
    std::ostringstream read;
    read << stat.rdbuf();
    const auto text = read.str();
    const auto close = text.rfind(") ");
    return close != std::string::npos && text.size() > close + 2 && text[close + 2] != 'Z';
}

TEST(GuestRunLayout, PlacesEveryTransportFileUnderTheRunDirectory) {
    const auto layout = guest_run_layout("/runs/r1/", "main.py");
    EXPECT_EQ(layout.directory, "/runs/r1");
    EXPECT_EQ(layout.work, "/runs/r1/work");
    EXPECT_EQ(layout.program, "/runs/r1/host_tools/main.py");
    EXPECT_EQ(layout.shim, "/runs/r1/host_tools/maf_host_tools.py");
    EXPECT_EQ(layout.launcher, "/runs/r1/host_tools/run_program.sh");
    EXPECT_EQ(layout.calls, "/runs/r1/host_tools/host_tool_calls");
    EXPECT_EQ(layout.exit_code, "/runs/r1/host_tools/program_exit_code");
}

TEST(GuestRunLayout, RefusesUnsafeRunDirectoriesAndProgramNames) {
    EXPECT_THROW(guest_run_layout("runs/r1"), InvalidArgument);
    EXPECT_THROW(guest_run_layout("/runs/a:b"), InvalidArgument);
    EXPECT_THROW(guest_run_layout("/runs/a\\b"), InvalidArgument);
    for (const std::string& program :
         {std::string("maf_host_tools.py"), std::string("run_program.sh"),
          std::string("program_pid.part"), std::string("host_tool_calls"), std::string("json.py"),
          std::string("os.pyc"), std::string("site.cpython-311-x86_64-linux-gnu.so"),
          std::string("sub/program.py"), std::string(".."), std::string("")}) {
        EXPECT_THROW(guest_run_layout("/runs/r1", program), InvalidArgument) << program;
    }
    EXPECT_NO_THROW(guest_run_layout("/runs/r1", "json_report.py"));
}

TEST(HostToolShim, WrapsOnlyNamesThatArePlainIdentifiers) {
    const auto shim = host_tool_shim({"add", "class", "call", "two words", "lookup_user"});
    EXPECT_NE(shim.find("def add(**arguments):"), std::string::npos);
    EXPECT_NE(shim.find("def lookup_user(**arguments):"), std::string::npos);
    EXPECT_EQ(shim.find("def class("), std::string::npos);
    EXPECT_EQ(shim.find("def two words("), std::string::npos);
    EXPECT_THROW(host_tool_shim({}, Seconds{0}), InvalidArgument);
}

class HostToolsOverExec : public ::testing::Test {
  protected:
    ExecResult run(const std::string& program, HostToolRunOptions options) {
        options.poll_interval = Seconds{0.05};
        return run_blocking(
            host_tool_calls_over_exec(host, layout, program, dispatcher(), std::move(options)));
    }

    HostToolDispatcher dispatcher() {
        return [this](std::string name, std::string arguments) -> Task<DispatchResult> {
            calls.emplace_back(name, arguments);
            if (name == "add") {
                co_return DispatchResult::value(arguments == R"({"a":2,"b":3})" ? "5" : "null");
            }
            if (name == "explode") {
                throw std::runtime_error("a host secret that must stay on the host");
            }
            co_return DispatchResult::refused("no such tool");
        };
    }

    HostShellSandbox host;
    GuestRunLayout layout = guest_run_layout(host.base_directory() + "/run");
    std::vector<std::pair<std::string, std::string>> calls;
};

TEST_F(HostToolsOverExec, ARealPythonProgramCallsHostToolsAndReportsItsExitCode) {
    const std::string program = R"(import os
import sys
import maf_host_tools
print("cwd", os.path.basename(os.getcwd()))
print("sum", maf_host_tools.add(a=2, b=3))
for name in ("missing", "explode"):
    try:
        maf_host_tools.call(name, x=1)
    except maf_host_tools.HostToolError as refusal:
        print("refused", name, str(refusal))
sys.exit(3)
)";
    HostToolRunOptions options;
    options.timeout = Seconds{30};
    options.tool_names = {"add"};
    const auto result = run(program, options);
    EXPECT_EQ(result.exit_code, 3) << result.stdout_bytes << result.stderr_bytes;
    EXPECT_NE(result.stdout_bytes.find("cwd work\n"), std::string::npos) << result.stdout_bytes;
    EXPECT_NE(result.stdout_bytes.find("sum 5\n"), std::string::npos) << result.stdout_bytes;
    EXPECT_NE(result.stdout_bytes.find("refused missing no such tool"), std::string::npos);
    EXPECT_NE(result.stdout_bytes.find("refused explode the host tool 'explode' failed"),
              std::string::npos);
    EXPECT_EQ(result.stdout_bytes.find("secret"), std::string::npos);
    ASSERT_EQ(calls.size(), 3u);
    EXPECT_EQ(calls[0].first, "add");
    EXPECT_EQ(calls[0].second, R"({"a":2,"b":3})");
    EXPECT_FALSE(fs::exists(layout.transport));
    EXPECT_TRUE(fs::is_directory(layout.work));
}

TEST_F(HostToolsOverExec, CallsOverTheRunsCapAreRefused) {
    const std::string program = R"(import maf_host_tools
print(maf_host_tools.call("add", a=2, b=3))
try:
    maf_host_tools.call("add", a=2, b=3)
except maf_host_tools.HostToolError as refusal:
    print("refused:", refusal)
)";
    HostToolRunOptions options;
    options.timeout = Seconds{30};
    options.max_calls = 1;
    const auto result = run(program, options);
    EXPECT_EQ(result.exit_code, 0) << result.stdout_bytes;
    EXPECT_NE(result.stdout_bytes.find("5\nrefused: the run's cap of 1 host-tool calls is "
                                       "exhausted"),
              std::string::npos)
        << result.stdout_bytes;
    EXPECT_EQ(calls.size(), 1u);
}

TEST_F(HostToolsOverExec, ATimeoutKillsTheProgramsGroupAndRemovesTheTransport) {
    const std::string program = R"(import os
import subprocess
import time
child = subprocess.Popen(["sleep", "60"])
with open("pids", "w") as handle:
    handle.write("%d %d" % (os.getpid(), child.pid))
print("started", flush=True)
time.sleep(60)
)";
    HostToolRunOptions options;
    options.timeout = Seconds{3};
    const auto started = std::chrono::steady_clock::now();
    try {
        run(program, options);
        FAIL() << "the run did not time out";
    } catch (const SandboxProgramTimeout& timeout) {
        EXPECT_EQ(timeout.signal(), "sent");
        EXPECT_EQ(timeout.reach(), "group");
        EXPECT_NE(timeout.output().find("started"), std::string::npos) << timeout.output();
    }
    EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::seconds(15));
    EXPECT_FALSE(fs::exists(layout.transport));
    std::ifstream pids(fs::path(layout.work) / "pids");
    pid_t program_pid = 0;
    pid_t child_pid = 0;
    pids >> program_pid >> child_pid;
    ASSERT_GT(program_pid, 0);
    ASSERT_GT(child_pid, 0);
    for (int i = 0; i < 50 && (alive(program_pid) || alive(child_pid)); ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    EXPECT_FALSE(alive(program_pid));
    EXPECT_FALSE(alive(child_pid));
}

TEST_F(HostToolsOverExec, RefusesANonPositiveTimeoutBeforeAnything) {
    HostToolRunOptions options;
    options.timeout = Seconds{0};
    EXPECT_THROW(run("print(1)", options), InvalidArgument);
    EXPECT_FALSE(fs::exists(layout.directory));
}

TEST_F(HostToolsOverExec, ReclaimRunRemovesTheRunDirectoryOnlyWhenTheLayoutIsWhole) {
    fs::create_directories(layout.work);
    std::ofstream(fs::path(layout.work) / "left.txt") << "x";
    auto scattered = layout;
    scattered.output = host.base_directory() + "/elsewhere/output.txt";
    EXPECT_FALSE(run_blocking(reclaim_run(host, scattered)));
    EXPECT_TRUE(fs::exists(layout.work));
    EXPECT_TRUE(run_blocking(reclaim_run(host, layout)));
    EXPECT_FALSE(fs::exists(layout.directory));
    EXPECT_TRUE(fs::exists(host.base_directory()));
    EXPECT_THROW(run_blocking(reclaim_run(host, layout, Seconds{0})), InvalidArgument);
}

}  // namespace
}  // namespace maf_sandbox
