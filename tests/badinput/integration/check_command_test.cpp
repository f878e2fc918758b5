// `maf-sandbox check --spec` fed malformed, wrongly typed and oversized spec files: exit code 125
// (the CLI's own failure) and one short line on stderr naming the field, never a crash, a stack
// trace or a hang.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>

#include "emulator_process.hpp"

namespace maf_sandbox::badinput {
namespace {

struct Outcome {
    int exit_code = -1;
    std::string stderr_text;
};

// Runs the CLI with a deadline; a run past it is killed and reported as exit -1.
Outcome run_cli(std::vector<std::string> args, std::chrono::seconds deadline) {
    args.insert(args.begin(), MAF_SANDBOX_CLI);
    std::vector<char*> argv;
    for (auto& a : args) {
        argv.push_back(a.data());
    }
    argv.push_back(nullptr);
    int err[2];
    if (::pipe2(err, O_CLOEXEC) != 0) {
        throw std::runtime_error("pipe failed");
    }
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, err[1], STDERR_FILENO);
    posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
    pid_t pid = -1;
    const int spawned = ::posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    ::close(err[1]);
    Outcome outcome;
    if (spawned != 0) {
        ::close(err[0]);
        return outcome;
    }
    const auto give_up = std::chrono::steady_clock::now() + deadline;
    pollfd p{err[0], POLLIN, 0};
    for (;;) {
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
            give_up - std::chrono::steady_clock::now());
        if (left.count() <= 0 || ::poll(&p, 1, static_cast<int>(left.count())) <= 0) {
            ::kill(pid, SIGKILL);
            break;
        }
        char buffer[4096];
        const auto n = ::read(err[0], buffer, sizeof buffer);
        if (n <= 0) {
            break;
        }
        if (outcome.stderr_text.size() < (1u << 20)) {
            outcome.stderr_text.append(buffer, static_cast<std::size_t>(n));
        }
    }
    ::close(err[0]);
    int status = 0;
    ::waitpid(pid, &status, 0);
    outcome.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    return outcome;
}

class CheckBadSpecs : public ::testing::Test {
  protected:
    Outcome check(const std::string& content) {
        const auto file = dir_.path() / "spec.json";
        std::ofstream(file, std::ios::binary | std::ios::trunc) << content;
        return run_cli(
            {"check", "--spec", file.string(), "--floor", "none", "--backend", "in-process"},
            std::chrono::seconds(30));
    }
    void expect_refused(const std::string& content, const std::string& field) {
        const auto outcome = check(content);
        const auto shown = content.substr(0, 80);
        EXPECT_EQ(outcome.exit_code, 125) << shown << ": " << outcome.stderr_text.substr(0, 300);
        EXPECT_NE(outcome.stderr_text.find(field), std::string::npos)
            << shown << ": stderr does not name '" << field
            << "': " << outcome.stderr_text.substr(0, 300);
        const auto lines = std::count(outcome.stderr_text.begin(), outcome.stderr_text.end(), '\n');
        EXPECT_LE(lines, 1) << shown << ": " << outcome.stderr_text.substr(0, 300);
        EXPECT_LT(outcome.stderr_text.size(), 2000u) << shown << ": stderr echoes the input";
        EXPECT_EQ(outcome.stderr_text.find("terminate called"), std::string::npos);
    }
    TempDir dir_;
};

TEST_F(CheckBadSpecs, MalformedSpecFilesExit125NamingTheField) {
    using namespace std::string_literals;
    expect_refused("", "spec");
    expect_refused("{\"kind\":", "spec");
    expect_refused("\xef\xbb\xbf{\"kind\":\"k\"}", "spec");  // a byte-order mark is not JSON
    expect_refused("{\"kind\":\"k\"}\0{\"kind\":\"x\"}"s, "spec");
    expect_refused("{\"kind\":\"\xff\xfe\"}", "spec");
    expect_refused(std::string(200000, '{'), "spec");
    expect_refused(R"({"kind":"k","egress":"o\npen"})", "egress");
    expect_refused(R"({"kind":"k","requires":[1,2,3]})", "requires");
    expect_refused(R"({"kind":"k","files_out":{"max_total_bytes":-1}})",
                   "files_out.max_total_bytes");
    expect_refused(R"({"kind":"k","declared_outputs":[{"path":7}]})", "declared_outputs[0].path");
    expect_refused(R"({"kind":"k","isolation_scope":"galaxy"})", "isolation_scope");
}

TEST_F(CheckBadSpecs, OversizedSpecFilesExit125WithAShortMessage) {
    // Under the 1 MiB bound a large value is parsed and refused naming its field.
    const std::string big(900u << 10, 'x');
    expect_refused(R"({"kind":"k","egress":")" + big + "\"}", "egress");
    expect_refused(R"({"kind":"k",")" + big + R"(":1})", "spec");
    // Over it the file is refused unread, naming the limit.
    expect_refused(R"({"kind":"k","egress":")" + std::string(8u << 20, 'x') + "\"}", "1 MiB");
    expect_refused("{\"kind\":\"k\"}" + std::string(8u << 20, ' ') + "x", "1 MiB");
}

TEST_F(CheckBadSpecs, AnEndlessSpecFileExits125Promptly) {
    const auto started = std::chrono::steady_clock::now();
    const auto outcome =
        run_cli({"check", "--spec", "/dev/zero", "--floor", "none", "--backend", "in-process"},
                std::chrono::seconds(10));
    EXPECT_EQ(outcome.exit_code, 125) << outcome.stderr_text.substr(0, 300);
    EXPECT_NE(outcome.stderr_text.find("spec"), std::string::npos);
    EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::seconds(5));
}

TEST_F(CheckBadSpecs, ASpecThatIsNotARegularFileExits125WithoutBlocking) {
    const auto fifo = dir_.path() / "fifo";
    ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
    for (const auto& path : {fifo.string(), dir_.path().string(), std::string("/dev/null")}) {
        const auto outcome =
            run_cli({"check", "--spec", path, "--floor", "none", "--backend", "in-process"},
                    std::chrono::seconds(10));
        EXPECT_EQ(outcome.exit_code, 125) << path << ": " << outcome.stderr_text.substr(0, 300);
        EXPECT_NE(outcome.stderr_text.find("not a regular file"), std::string::npos)
            << path << ": " << outcome.stderr_text.substr(0, 300);
    }
}

}  // namespace
}  // namespace maf_sandbox::badinput
