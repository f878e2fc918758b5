// The CLI against sandboxes created by another process (this test): purge from a separate
// process reaches them, and `--backend local` without consent to container isolation is refused.
#include <gtest/gtest.h>
#include <stdio.h>
#include <sys/wait.h>

#include <array>
#include <filesystem>

#include "maf_sandbox/core/run_blocking.hpp"
#include "maf_sandbox/local/local_backend.hpp"
#include "sandbox_fixture.hpp"

#ifndef MAF_SANDBOX_CLI
#define MAF_SANDBOX_CLI ""
#endif

namespace maf_sandbox::local {
namespace {

using runtime::testing::StateDir;

struct Outcome {
    int status = -1;
    std::string output;
};

Outcome run_cli(const StateDir& state, const std::string& arguments) {
    const auto command = fmt::format("MAF_SANDBOX_STATE_DIR={} {} {} 2>&1", state.path().string(),
                                     MAF_SANDBOX_CLI, arguments);
    Outcome outcome;
    FILE* pipe = ::popen(command.c_str(), "r");
    std::array<char, 4096> buffer{};
    while (const auto n = ::fread(buffer.data(), 1, buffer.size(), pipe)) {
        outcome.output.append(buffer.data(), n);
    }
    const int status = ::pclose(pipe);
    outcome.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    return outcome;
}

class Cli : public ::testing::Test {
  protected:
    void SetUp() override {
        if (!std::filesystem::exists(MAF_SANDBOX_CLI)) {
            GTEST_SKIP() << "build the maf-sandbox target first";
        }
    }
};

TEST_F(Cli, PurgeFromAnotherProcessRemovesTheConversationsSandboxes) {
    StateDir state;
    LocalBackendConfig config;
    config.state_dir = state.path();
    LocalBackend backend(config);
    SandboxSpecFields fields;
    fields.kind = "shell";
    auto sandbox = run_blocking(
        backend.acquire({"purge-scope", "purge-thread", "a", ""}, SandboxSpec(fields)));
    ASSERT_EQ(backend.list({}).size(), 1u);

    const auto listed = run_cli(state, "ls --json");
    EXPECT_EQ(listed.status, 0) << listed.output;
    EXPECT_NE(listed.output.find("\"state\":\"running\""), std::string::npos) << listed.output;

    const auto purged = run_cli(state, "purge --scope purge-scope --thread purge-thread");
    EXPECT_EQ(purged.status, 0) << purged.output;
    EXPECT_EQ(purged.output, "1\n");
    EXPECT_TRUE(backend.list({}).empty());
    ExecRequest request;
    request.command = std::string("true");
    // The purged sandbox is gone: its handle can no longer run anything.
    EXPECT_ANY_THROW(run_blocking(sandbox->exec(request)));
}

TEST_F(Cli, LocalBackendWithoutFloorConsentIsRefusedNamingTheFlag) {
    StateDir state;
    const auto refused = run_cli(state, "run --backend local -- true");
    EXPECT_NE(refused.status, 0);
    EXPECT_NE(refused.output.find("--floor container"), std::string::npos) << refused.output;
    EXPECT_FALSE(std::filesystem::exists(state.path() / "sandboxes") &&
                 !std::filesystem::is_empty(state.path() / "sandboxes"));
}

TEST_F(Cli, RunPassesStreamsAndTheExitCodeThroughAndMarksDroppedOutput) {
    StateDir state;
    const auto ran =
        run_cli(state, "run --backend local --floor container -- sh -c 'echo out; exit 7'");
    EXPECT_EQ(ran.status, 7) << ran.output;
    EXPECT_EQ(ran.output, "out\n");
    const auto capped = run_cli(state,
                                "run --backend local --floor container --max-output 10 -- "
                                "sh -c 'head -c 100 /dev/zero | tr \"\\\\0\" x'");
    EXPECT_NE(capped.output.find("90 bytes dropped"), std::string::npos) << capped.output;
    EXPECT_EQ(run_cli(state, "ls --json").output, "[]\n");
    // Bad flags are the CLI's own failure: 125, which no program status below it can be mistaken
    // for (Docker's convention).
    EXPECT_EQ(run_cli(state, "run --backend local --floor container --memory -5 -- true").status,
              125);
}

}  // namespace
}  // namespace maf_sandbox::local
