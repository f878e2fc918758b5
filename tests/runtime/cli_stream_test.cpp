// The lean front end's warm exec (`maf-sandbox exec`, served without the full CLI) against a
// sandbox this test made: output is printed as the program writes it, and stdin that is not a
// terminal reaches the program.
#include <gtest/gtest.h>
#include <stdio.h>
#include <sys/wait.h>

#include <array>
#include <chrono>
#include <filesystem>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "maf_sandbox/core/run_blocking.hpp"
#include "maf_sandbox/local/local_backend.hpp"
#include "sandbox_fixture.hpp"

#ifndef MAF_SANDBOX_CLI
#define MAF_SANDBOX_CLI ""
#endif

namespace maf_sandbox::local {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using runtime::testing::StateDir;

class LeanExecStream : public ::testing::Test {
  protected:
    void SetUp() override {
        if (!std::filesystem::exists(MAF_SANDBOX_CLI)) {
            GTEST_SKIP() << "build the maf-sandbox target first";
        }
        LocalBackendConfig config;
        config.state_dir = state_.path();
        backend_ = std::make_unique<LocalBackend>(config);
        SandboxSpecFields fields;
        fields.kind = "shell";
        fields.image = "host";
        // The key a `maf-sandbox exec --scope lean-stream --thread t` looks up.
        sandbox_ =
            run_blocking(backend_->acquire({"lean-stream", "t", "cli", ""}, SandboxSpec(fields)));
    }
    void TearDown() override {
        if (backend_) {
            run_blocking(backend_->dispose_scope("lean-stream", "t"));
        }
    }

    // `shell_prefix | maf-sandbox exec ... ARGS` (stderr to /dev/null), each line of its
    // stdout with the time it was read.
    struct Line {
        Clock::time_point at;
        std::string text;
    };
    std::vector<Line> exec_lines(const std::string& shell_prefix, const std::string& args,
                                 int& status) {
        const auto command = fmt::format(
            "{} MAF_SANDBOX_STATE_DIR={} {} exec --backend local --floor container --scope "
            "lean-stream --thread t {} 2>/dev/null",
            shell_prefix, state_.path().string(), MAF_SANDBOX_CLI, args);
        FILE* pipe = ::popen(command.c_str(), "r");
        std::vector<Line> lines;
        std::array<char, 4096> buffer{};
        while (::fgets(buffer.data(), static_cast<int>(buffer.size()), pipe) != nullptr) {
            lines.push_back({Clock::now(), buffer.data()});
        }
        const int raw = ::pclose(pipe);
        status = WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
        return lines;
    }

    StateDir state_;
    std::unique_ptr<LocalBackend> backend_;
    std::shared_ptr<Sandbox> sandbox_;
};

TEST_F(LeanExecStream, LinesArriveAsTheProgramPrintsThem) {
    int status = -1;
    const auto lines = exec_lines(
        "true |", "-- sh -c 'for i in $(seq 1 30); do echo line$i; sleep 0.1; done'", status);
    EXPECT_EQ(status, 0);
    ASSERT_EQ(lines.size(), 30u);
    EXPECT_EQ(lines.front().text, "line1\n");
    EXPECT_EQ(lines.back().text, "line30\n");
    // Over the program's 3 s, not bunched at its end (a generous bound, never a speed).
    EXPECT_GE(lines.back().at - lines.front().at, 1500ms);
}

TEST_F(LeanExecStream, PipedStdinReachesTheProgram) {
    int status = -1;
    const auto lines = exec_lines("echo x |", "-- cat", status);
    EXPECT_EQ(status, 0);
    ASSERT_EQ(lines.size(), 1u);
    EXPECT_EQ(lines.front().text, "x\n");
}

TEST_F(LeanExecStream, TheExitStatusStaysTheProgramsWithStdinPiped) {
    int status = -1;
    exec_lines("printf 'a\\nb\\n' |", "-- sh -c 'wc -l; exit 3'", status);
    EXPECT_EQ(status, 3);
}

TEST_F(LeanExecStream, ATimeoutKeepsWhatWasPrintedBeforeIt) {
    int status = -1;
    const auto lines = exec_lines("true |", "--timeout 1 -- sh -c 'echo before; sleep 30'", status);
    EXPECT_EQ(status, 125);
    ASSERT_EQ(lines.size(), 1u);
    EXPECT_EQ(lines.front().text, "before\n");
}

}  // namespace
}  // namespace maf_sandbox::local
