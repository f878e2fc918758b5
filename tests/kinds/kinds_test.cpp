// The codeact and shell kinds against a real shell (HostShellSandbox behind a tiny test backend)
// and the router: what reaches the guest, what comes back, and that the finally always cleans up.
#include <gtest/gtest.h>
#include <spdlog/logger.h>
#include <spdlog/sinks/ostream_sink.h>

#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "host_shell_backend.hpp"
#include "maf_sandbox/core/errors.hpp"
#include "maf_sandbox/core/outputs.hpp"
#include "maf_sandbox/core/run_blocking.hpp"
#include "maf_sandbox/kinds/codeact.hpp"
#include "maf_sandbox/kinds/shell.hpp"
#include "test_dirs.hpp"

namespace maf_sandbox::kinds {
namespace {

namespace fs = std::filesystem;
using testing::HostShellBackend;
using testing::HostShellBackendOptions;

using testing::TempDir;

void write_host_file(const fs::path& path, const std::string& content) {
    fs::create_directories(path.parent_path());
    std::ofstream(path, std::ios::binary) << content;
}

DeclaredOutput declared(std::string path) {
    DeclaredOutput output;
    output.path = std::move(path);
    return output;
}

bool is_twelve_hex(const std::string& text) {
    return text.size() == 12 && text.find_first_not_of("0123456789abcdef") == std::string::npos;
}

class KindsTest : public ::testing::Test {
  protected:
    void SetUp() override {
        log_ = std::make_shared<spdlog::logger>(
            "kinds-test", std::make_shared<spdlog::sinks::ostream_sink_mt>(log_text_));
        use_backend({});
    }

    void use_backend(HostShellBackendOptions options) {
        backend_ = std::make_shared<HostShellBackend>(std::move(options));
        SandboxRouterOptions router_options;
        router_options.min_isolation = Isolation::none;
        router_options.log = log_;
        router_ = std::make_shared<SandboxRouter>(
            std::vector<std::shared_ptr<SandboxBackend>>{backend_}, router_options);
    }

    CodeActTool codeact(CodeActConfig config = {}, std::optional<OutputSink> sink = {}) {
        return CodeActTool(router_, std::move(config),
                           std::make_shared<FileStore>(store_dir_.path()), std::move(sink), log_);
    }

    // Every entry left in the guest base of the caller's codeact sandbox.
    std::vector<std::string> leftovers(const std::string& kind) const {
        std::vector<std::string> names;
        for (const auto& [identity, sandbox] : backend_->live) {
            if (identity.second != kind) {
                continue;
            }
            for (const auto& entry : fs::directory_iterator(sandbox->base_directory())) {
                names.push_back(entry.path().filename().string());
            }
        }
        return names;
    }

    CallerContext caller_{"tenant-a",  std::string("thread-1"), "agent-x", nullptr, {},
                          std::nullopt};
    TempDir store_dir_;
    TempDir out_dir_;
    std::ostringstream log_text_;
    std::shared_ptr<spdlog::logger> log_;
    std::shared_ptr<HostShellBackend> backend_;
    std::shared_ptr<SandboxRouter> router_;
};

TEST_F(KindsTest, CodeActRunsTheProgramWithAListedInputFile) {
    write_host_file(store_dir_.path() / "data" / "numbers.csv", "1\n2\n39\n");
    auto tool = codeact();
    auto result = run_blocking(tool.execute_code(
        caller_, {"import sys\nprint(sum(int(l) for l in open('data/numbers.csv')))\n"
                  "print('warn', file=sys.stderr)\n",
                  {"data/numbers.csv"},
                  {}}));
    ASSERT_FALSE(result.is_error()) << result.message;
    ASSERT_TRUE(result.program);
    EXPECT_EQ(result.program->exit_code, 0);
    EXPECT_EQ(result.program->stdout_text, "42\n");
    EXPECT_EQ(result.program->stderr_text, "warn\n");
    EXPECT_EQ(result.provenance.backend, "host-shell");
    EXPECT_EQ(result.provenance.isolation, Isolation::none);
    EXPECT_EQ(result.provenance.egress, Egress::closed);
    EXPECT_NE(result.text().find("backend host-shell, isolation none, egress closed"),
              std::string::npos);
}

TEST_F(KindsTest, CodeActRefusesANameAbsentFromTheStoreListingBeforeAcquiring) {
    write_host_file(store_dir_.path() / "present.txt", "x");
    // A file outside the store that exists on the host is still not in the listing.
    auto tool = codeact();
    for (const std::string name : {"absent.txt", "../present.txt", "/etc/passwd", "present.txt/"}) {
        auto result = run_blocking(tool.execute_code(caller_, {"print(1)", {name}, {}}));
        EXPECT_EQ(result.failure, CallFailure::refused) << name;
        EXPECT_NE(result.message.find("is not in the file store"), std::string::npos) << name;
        EXPECT_NE(result.message.find("present.txt"), std::string::npos) << name;
    }
    EXPECT_TRUE(backend_->acquired.empty());
}

TEST_F(KindsTest, CodeActWithNoStoreRefusesEveryInputName) {
    CodeActTool tool(router_, {}, nullptr, std::nullopt, log_);
    auto result = run_blocking(tool.execute_code(caller_, {"print(1)", {"anything.csv"}, {}}));
    EXPECT_EQ(result.failure, CallFailure::refused);
    EXPECT_NE(result.message.find("'anything.csv' is not in the file store"), std::string::npos);
    EXPECT_NE(result.message.find("The file store is empty"), std::string::npos);
    EXPECT_TRUE(backend_->acquired.empty());
}

TEST_F(KindsTest, CodeActStoreNeverListsLinks) {
    write_host_file(store_dir_.path() / "real.txt", "x");
    fs::create_symlink("/etc/hostname", store_dir_.path() / "link.txt");
    FileStore store(store_dir_.path());
    EXPECT_EQ(store.list(), std::vector<std::string>{"real.txt"});
    EXPECT_THROW(store.read("link.txt", 1024), InvalidArgument);
}

TEST_F(KindsTest, CodeActLandsDeclaredOutputsInTheSink) {
    CodeActConfig config;
    config.outputs.push_back(DeclaredOutput{"summary.json", OutputDisposition::land,
                                            "application/json", true, std::nullopt});
    auto tool = codeact(config, make_file_system_sink(out_dir_.path()));
    EXPECT_TRUE(tool.spec()->requires_capabilities.count(Capability::files_out));
    auto result = run_blocking(tool.execute_code(
        caller_, {"open('summary.json','w').write('{\"total\": 42}')\n", {}, {}}));
    ASSERT_FALSE(result.is_error()) << result.message;
    ASSERT_EQ(result.landed.size(), 1u);
    EXPECT_EQ(result.landed[0], "summary.json (13 bytes)");
    std::ifstream landed(out_dir_.path() / "summary.json");
    std::string content((std::istreambuf_iterator<char>(landed)), {});
    EXPECT_EQ(content, "{\"total\": 42}");
    // The host path of the landing never reaches the model.
    EXPECT_EQ(result.text().find(out_dir_.path().string()), std::string::npos);
}

TEST_F(KindsTest, CodeActLandsHostAndCallPatternsOnceEachBesideDeclaredOutputs) {
    CodeActConfig config;
    config.outputs.push_back(DeclaredOutput{"summary.json", OutputDisposition::land,
                                            "application/json", true, std::nullopt});
    config.output_patterns = {"*.json"};
    config.outputs_per_call = true;
    auto tool = codeact(config, make_file_system_sink(out_dir_.path()));
    EXPECT_TRUE(tool.spec()->outputs_named_at_call_time);
    auto result = run_blocking(tool.execute_code(
        caller_, {"import os\nopen('summary.json','w').write('{}')\n"
                  "open('extra.json','w').write('[]')\nos.mkdir('d')\n"
                  "open('d/t.csv','w').write('a')\nos.symlink('/etc/passwd', 'p.csv')\n",
                  {},
                  {"d/*.csv", "*.csv", "absent.txt"}}));
    ASSERT_FALSE(result.is_error()) << result.message;
    // summary.json once (declared, also matched by *.json), extra.json and d/t.csv; the link
    // p.csv is never matched.
    EXPECT_EQ(result.landed,
              (std::vector<std::string>{"summary.json (2 bytes)", "d/t.csv (1 bytes)",
                                        "extra.json (2 bytes)"}));
    EXPECT_EQ(result.unmatched_outputs, (std::vector<std::string>{"*.csv", "absent.txt"}));
    EXPECT_TRUE(std::filesystem::is_regular_file(out_dir_.path() / "d" / "t.csv"));
}

TEST_F(KindsTest, CodeActRefusesOutputsPerCallUnlessTheHostTakesThem) {
    auto tool = codeact();
    auto result = run_blocking(tool.execute_code(caller_, {"print(1)", {}, {"*.png"}}));
    EXPECT_EQ(result.failure, CallFailure::refused);
    EXPECT_FALSE(result.program);
    EXPECT_TRUE(backend_->acquired.empty());
}

TEST_F(KindsTest, CodeActDeclaredOutputsWithoutASinkAreRefusedAtAttach) {
    CodeActConfig config;
    config.outputs.push_back(declared("summary.json"));
    EXPECT_THROW(codeact(config), SandboxOutputSinkRequired);
}

TEST_F(KindsTest, CodeActMissingDeclaredOutputIsAFixedSentence) {
    CodeActConfig config;
    config.outputs.push_back(declared("summary.json"));
    auto tool = codeact(config, make_file_system_sink(out_dir_.path()));
    auto result = run_blocking(tool.execute_code(caller_, {"print('no file')", {}, {}}));
    EXPECT_EQ(result.failure, CallFailure::refused);
    EXPECT_NE(result.message.find("did not write every declared output"), std::string::npos);
    ASSERT_TRUE(result.program);
    EXPECT_EQ(result.program->stdout_text, "no file\n");
}

TEST_F(KindsTest, CodeActOverCapOutputIsRefusedWithTheHeadAndTheDroppedCount) {
    CodeActConfig config;
    config.sandbox.max_output_bytes = 1000;
    config.sandbox.timeout = Seconds{10.0};
    auto tool = codeact(config);
    auto result = run_blocking(
        tool.execute_code(caller_, {"import sys\nsys.stdout.write('x' * 5000)\n", {}, {}}));
    ASSERT_EQ(result.failure, CallFailure::output_over_cap) << result.message;
    ASSERT_TRUE(result.program);
    EXPECT_LE(result.program->stdout_text.size(), 1000u);
    EXPECT_FALSE(result.program->stdout_text.empty());
    EXPECT_EQ(result.dropped_bytes, 5000u - result.program->stdout_text.size());
    EXPECT_NE(result.message.find("refused, not truncated"), std::string::npos);
    EXPECT_NE(result.message.find(std::to_string(result.dropped_bytes) + " bytes were dropped"),
              std::string::npos);
}

TEST_F(KindsTest, CodeActFailingProgramIsANormalResultAndItsCallDirectoryIsReclaimed) {
    auto tool = codeact();
    auto result = run_blocking(tool.execute_code(
        caller_, {"open('scratch.txt','w').write('x')\nraise SystemExit(3)\n", {}, {}}));
    EXPECT_FALSE(result.is_error());
    ASSERT_TRUE(result.program);
    EXPECT_EQ(result.program->exit_code, 3);
    ASSERT_EQ(backend_->acquired.size(), 1u);
    EXPECT_TRUE(leftovers("codeact").empty());
    EXPECT_TRUE(backend_->disposed.empty()) << "a backend declaring reclaim keeps its sandbox";
}

TEST_F(KindsTest, CodeActTimeoutIsAFixedSentenceAndStillCleansUp) {
    CodeActConfig config;
    config.sandbox.timeout = Seconds{0.5};
    auto tool = codeact(config);
    auto result = run_blocking(tool.execute_code(
        caller_, {"open('a','w').write('x')\nimport time\ntime.sleep(30)\n", {}, {}}));
    EXPECT_EQ(result.failure, CallFailure::timed_out);
    EXPECT_NE(result.message.find("did not finish within 0.5 seconds"), std::string::npos);
    EXPECT_TRUE(leftovers("codeact").empty());
}

TEST_F(KindsTest, ConversationSandboxOnABackendWithoutReclaimSurvivesTheCallItsGuestCleansUp) {
    use_backend(HostShellBackendOptions{"no-reclaim", false, true, nullptr});
    auto tool = codeact();
    auto result = run_blocking(tool.execute_code(
        caller_, {"open('scratch.txt','w').write('x')\nopen('../kept.txt','w').write('y')\n"
                  "raise RuntimeError('boom')",
                  {},
                  {}}));
    ASSERT_TRUE(result.program);
    EXPECT_NE(result.program->exit_code, 0);
    // The call directory went through the guest's own rm; the conversation's sandbox stays.
    EXPECT_TRUE(backend_->disposed.empty());
    ASSERT_EQ(backend_->live.size(), 1u);
    EXPECT_EQ(leftovers("codeact"), std::vector<std::string>{"kept.txt"});
}

TEST_F(KindsTest, CallScopedSandboxOnABackendWithoutReclaimIsDisposedInTheFinally) {
    use_backend(HostShellBackendOptions{"no-reclaim", false, true, nullptr});
    CodeActConfig config;
    config.sandbox.isolation_scope = IsolationScope::call;
    auto tool = codeact(config);
    auto result = run_blocking(tool.execute_code(caller_, {"raise RuntimeError('boom')", {}, {}}));
    ASSERT_TRUE(result.program);
    EXPECT_NE(result.program->exit_code, 0);
    ASSERT_FALSE(backend_->disposed.empty());
    EXPECT_EQ(backend_->disposed[0].second, std::optional<std::string>("codeact"));
    EXPECT_TRUE(backend_->live.empty());
}

TEST_F(KindsTest, CallScopedSandboxIsDisposedWhenTheCallEnds) {
    CodeActConfig config;
    config.sandbox.isolation_scope = IsolationScope::call;
    auto tool = codeact(config);
    auto result = run_blocking(tool.execute_code(caller_, {"print('hi')", {}, {}}));
    ASSERT_FALSE(result.is_error()) << result.message;
    EXPECT_TRUE(backend_->live.empty());
    ASSERT_FALSE(backend_->disposed.empty());
}

TEST_F(KindsTest, CancelledCallIsCleanedUpBeforeTheCancellationPropagates) {
    using namespace boost::asio::experimental::awaitable_operators;
    auto tool = codeact();
    boost::asio::io_context io;
    const auto started = std::chrono::steady_clock::now();
    auto race = [&]() -> Task<bool> {
        boost::asio::steady_timer timer(io, std::chrono::milliseconds(500));
        // Named, not temporaries: g++ 12 destroys temporaries of a co_await operand twice.
        CodeActArguments arguments{"open('a','w').write('x')\nimport time\ntime.sleep(30)", {}, {}};
        auto call = tool.execute_code(caller_, std::move(arguments));
        auto outcome = co_await (std::move(call) || timer.async_wait(boost::asio::use_awaitable));
        co_return outcome.index() == 1;
    };
    EXPECT_TRUE(run_blocking(io, race()));
    EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::seconds(5));
    ASSERT_EQ(backend_->acquired.size(), 1u);
    EXPECT_TRUE(leftovers("codeact").empty()) << log_text_.str();
}

TEST_F(KindsTest, CallWithNoThreadIsRefusedWithAFixedSentence) {
    auto tool = codeact();
    CallerContext unbound{"tenant-a", std::nullopt, "agent-x", nullptr, {}, std::nullopt};
    auto result = run_blocking(tool.execute_code(unbound, {"print(1)", {}, {}}));
    EXPECT_EQ(result.failure, CallFailure::refused);
    EXPECT_EQ(result.message,
              "This call is not bound to a conversation, so no sandbox can be chosen for it. Call "
              "the tool from within a session.");
    EXPECT_TRUE(backend_->acquired.empty());
}

TEST_F(KindsTest, TheKeyComesFromTheHostContextNeverFromArguments) {
    auto tool = codeact();
    // Arguments that look like key material change nothing: the arguments type has no key fields.
    static_assert(sizeof(CodeActArguments) ==
                  sizeof(std::string) + 2 * sizeof(std::vector<std::string>));
    run_blocking(tool.execute_code(
        caller_, {"# scope=evil thread_id=evil agent_dir=evil\nprint(1)", {}, {}}));
    ASSERT_EQ(backend_->acquired.size(), 1u);
    const auto& key = backend_->acquired[0].first;
    EXPECT_EQ(key.scope, "tenant-a");
    EXPECT_EQ(key.thread_id, "thread-1");
    EXPECT_EQ(key.agent_dir, "agent-x");
    // At conversation scope the key names the conversation, not the call (the call's directory
    // has its own random name).
    EXPECT_EQ(key.call_id, "");
    EXPECT_EQ(backend_->acquired[0].second->kind, "codeact");
}

TEST_F(KindsTest, ConversationScopeCallsShareOneSandboxAndItsState) {
    ShellTool tool(router_, {}, log_);
    // The first call leaves a file beside its own call directory, in the sandbox's base.
    auto first = run_blocking(tool.run_shell(caller_, "echo kept > ../state.txt; pwd"));
    ASSERT_TRUE(first.program) << first.message;
    ASSERT_EQ(first.program->exit_code, 0) << first.program->stderr_text;
    auto second = run_blocking(tool.run_shell(caller_, "cat ../state.txt; pwd"));
    ASSERT_TRUE(second.program) << second.message;
    EXPECT_EQ(second.program->exit_code, 0) << second.program->stderr_text;
    EXPECT_EQ(second.program->stdout_text.substr(0, 5), "kept\n");
    EXPECT_EQ(backend_->created, 1);
    EXPECT_EQ(backend_->live.size(), 1u);
    ASSERT_EQ(backend_->acquired.size(), 2u);
    EXPECT_EQ(backend_->acquired[0].first, backend_->acquired[1].first);
    // Each call still ran in a call directory of its own, and each was reclaimed.
    const auto first_dir =
        fs::path(first.program->stdout_text.substr(0, first.program->stdout_text.size() - 1))
            .filename();
    const auto second_dir = second.program->stdout_text.substr(5);
    EXPECT_TRUE(is_twelve_hex(first_dir.string())) << first.program->stdout_text;
    EXPECT_EQ(second_dir.find(first_dir.string()), std::string::npos) << second_dir;
    EXPECT_EQ(leftovers("shell"), std::vector<std::string>{"state.txt"});
}

TEST_F(KindsTest, CallScopeKeysEachCallByItsOwnId) {
    ShellConfig config;
    config.sandbox.isolation_scope = IsolationScope::call;
    ShellTool tool(router_, config, log_);
    run_blocking(tool.run_shell(caller_, "true"));
    run_blocking(tool.run_shell(caller_, "true"));
    ASSERT_EQ(backend_->acquired.size(), 2u);
    const auto& first = backend_->acquired[0].first.call_id;
    const auto& second = backend_->acquired[1].first.call_id;
    EXPECT_TRUE(is_twelve_hex(first)) << first;
    EXPECT_TRUE(is_twelve_hex(second)) << second;
    EXPECT_NE(first, second);
    EXPECT_EQ(backend_->created, 2);
    EXPECT_TRUE(backend_->live.empty());
}

TEST_F(KindsTest, AHostCallScopeFloorKeysEachCallEvenWhenTheKindAsksForConversation) {
    SandboxRouterOptions options;
    options.min_isolation = Isolation::none;
    options.min_isolation_scope = IsolationScope::call;
    options.log = log_;
    router_ = std::make_shared<SandboxRouter>(
        std::vector<std::shared_ptr<SandboxBackend>>{backend_}, options);
    ShellTool tool(router_, {}, log_);
    run_blocking(tool.run_shell(caller_, "true"));
    ASSERT_EQ(backend_->acquired.size(), 1u);
    EXPECT_TRUE(is_twelve_hex(backend_->acquired[0].first.call_id));
    EXPECT_TRUE(backend_->live.empty()) << "the call-scoped sandbox is disposed after its call";
}

TEST_F(KindsTest, CodeActRunsPythonFromItsOwnCallDirectoryWithFixedArgv) {
    auto tool = codeact();
    auto result =
        run_blocking(tool.execute_code(caller_, {"import os\nprint(os.getcwd())", {}, {}}));
    ASSERT_TRUE(result.program) << result.message;
    const auto cwd = result.program->stdout_text.substr(0, result.program->stdout_text.size() - 1);
    const fs::path path(cwd);
    EXPECT_TRUE(is_twelve_hex(path.filename().string())) << cwd;
}

TEST_F(KindsTest, InfrastructureFailureIsAFixedSentenceAndTheDetailGoesOnlyToTheLog) {
    use_backend(HostShellBackendOptions{
        "failing", true, true,
        std::make_exception_ptr(SystemError(13, "creating /srv/secret/tenant-1234 for sandbox"))});
    auto tool = codeact();
    auto result = run_blocking(tool.execute_code(caller_, {"print(1)", {}, {}}));
    EXPECT_EQ(result.failure, CallFailure::infrastructure);
    EXPECT_EQ(result.text().find("/srv/secret"), std::string::npos);
    EXPECT_NE(result.message.find("the backend could not provide one"), std::string::npos);
    EXPECT_NE(log_text_.str().find("/srv/secret/tenant-1234"), std::string::npos);
}

TEST_F(KindsTest, AttachRefusesABackendThatCannotExec) {
    use_backend(HostShellBackendOptions{"no-exec", true, false, nullptr});
    EXPECT_THROW(codeact(), SandboxCapabilityNotSupported);
    EXPECT_THROW(ShellTool(router_, {}, log_), SandboxCapabilityNotSupported);
}

TEST_F(KindsTest, EgressIsAllowlistWithHostsAndClosedWithoutNeverUnrestricted) {
    CodeActConfig closed;
    EXPECT_EQ(codeact_spec(closed)->egress, Egress::closed);
    CodeActConfig allow;
    allow.sandbox.egress_allow = {"pypi.org"};
    EXPECT_EQ(codeact_spec(allow)->egress, Egress::allowlist);
    EXPECT_EQ(codeact_spec(allow)->egress_allow, std::vector<std::string>{"pypi.org"});
    EXPECT_EQ(codeact_spec(closed)->requires_capabilities,
              (std::set<Capability>{Capability::exec, Capability::files_in}));
    ShellConfig shell;
    EXPECT_EQ(shell_spec(shell)->egress, Egress::closed);
    EXPECT_EQ(shell_spec(shell)->requires_capabilities, std::set<Capability>{Capability::exec});
}

TEST_F(KindsTest, ShellRunsTheCommandLineInItsCallDirectoryAndCleansUp) {
    ShellTool tool(router_, {}, log_);
    auto result = run_blocking(
        tool.run_shell(caller_, "echo hello > f.txt && cat f.txt && basename \"$(pwd)\""));
    ASSERT_FALSE(result.is_error()) << result.message;
    ASSERT_TRUE(result.program);
    EXPECT_EQ(result.program->exit_code, 0);
    ASSERT_EQ(result.program->stdout_text.size(), 6u + 13u);
    EXPECT_EQ(result.program->stdout_text.substr(0, 6), "hello\n");
    EXPECT_TRUE(is_twelve_hex(result.program->stdout_text.substr(6, 12)));
    EXPECT_TRUE(leftovers("shell").empty());
    EXPECT_EQ(backend_->acquired.at(0).second->kind, "shell");
}

TEST_F(KindsTest, ShellNonZeroExitIsTheCommandsOwnResult) {
    ShellTool tool(router_, {}, log_);
    auto result = run_blocking(tool.run_shell(caller_, "echo oops >&2; exit 7"));
    EXPECT_FALSE(result.is_error());
    ASSERT_TRUE(result.program);
    EXPECT_EQ(result.program->exit_code, 7);
    EXPECT_EQ(result.program->stderr_text, "oops\n");
    EXPECT_NE(result.text().find("exit code: 7"), std::string::npos);
}

TEST_F(KindsTest, ACallInAReplacedSandboxSaysSoToTheModelAndInTheLog) {
    ShellTool tool(router_, {}, log_);
    auto first = run_blocking(tool.run_shell(caller_, "true"));
    EXPECT_FALSE(first.sandbox_replaced);
    EXPECT_EQ(first.text().find("discarded"), std::string::npos);
    // The backend discards the conversation's sandbox (an exec whose outcome is unknown), and
    // marks the one it hands out next: the conversation's next call reaches a new sandbox.
    backend_->live.clear();
    backend_->replace_next =
        SandboxReplacement{"old-id", "the backend discarded sandbox old-id (an exec failed)"};
    auto second = run_blocking(tool.run_shell(caller_, "echo hi"));
    EXPECT_FALSE(second.is_error()) << second.message;
    EXPECT_TRUE(second.sandbox_replaced);
    EXPECT_EQ(second.text().rfind("Note: this conversation's previous sandbox was discarded", 0),
              0u)
        << second.text();
    EXPECT_EQ(second.text().find("old-id"), std::string::npos)
        << "the model reads a fixed sentence";
    EXPECT_NE(log_text_.str().find("old-id"), std::string::npos) << "the detail goes to the log";
}

}  // namespace
}  // namespace maf_sandbox::kinds
