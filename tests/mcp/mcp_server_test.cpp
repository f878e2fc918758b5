// The MCP server's JSON-RPC face over a real shell sandbox (HostShellSandbox behind a tiny test
// backend): negotiation, tool listing, calls, structured errors, cancellation, progress, and the
// session end disposing its sandboxes.
#include <gtest/gtest.h>
#include <spdlog/logger.h>
#include <spdlog/sinks/ostream_sink.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <chrono>
#include <filesystem>
#include <sstream>

#include "host_shell_backend.hpp"
#include "maf_sandbox/core/run_blocking.hpp"
#include "maf_sandbox/mcp/server.hpp"

namespace maf_sandbox::mcp {
namespace {

namespace json = boost::json;
using testing::HostShellBackend;

json::object parse(const std::optional<std::string>& text) {
    EXPECT_TRUE(text.has_value());
    return text ? json::parse(*text).as_object() : json::object{};
}

std::string call(std::string_view id, std::string_view tool, std::string_view arguments,
                 std::string_view meta = "") {
    return fmt::format(
        R"({{"jsonrpc":"2.0","id":{},"method":"tools/call","params":{{"name":"{}","arguments":{}{}}}}})",
        id, tool, arguments, meta.empty() ? "" : fmt::format(R"(,"_meta":{})", meta));
}

class McpServerTest : public ::testing::Test {
  protected:
    void SetUp() override { build({}); }

    void build(kinds::SandboxSettings settings) {
        log_ = std::make_shared<spdlog::logger>(
            "mcp-test", std::make_shared<spdlog::sinks::ostream_sink_mt>(log_text_));
        log_->set_level(spdlog::level::info);
        backend_ = std::make_shared<HostShellBackend>();
        SandboxRouterOptions options;
        options.min_isolation = Isolation::none;
        options.log = log_;
        router_ = std::make_shared<SandboxRouter>(
            std::vector<std::shared_ptr<SandboxBackend>>{backend_}, options);
        kinds::CodeActConfig codeact;
        codeact.sandbox = settings;
        McpServerConfig config;
        config.scope = "test-scope";
        server_ = std::make_unique<McpServer>(
            config, router_,
            std::make_shared<kinds::CodeActTool>(router_, codeact, nullptr, std::nullopt, log_),
            std::make_shared<kinds::ShellTool>(router_, kinds::ShellConfig{settings}, log_), log_);
        session_ = server_->open_session("session-1");
    }

    json::object handle(std::string text) {
        return parse(run_blocking(io_, session_->handle(text)));
    }

    json::object initialize(std::string_view version = "2025-06-18") {
        return handle(fmt::format(
            R"({{"jsonrpc":"2.0","id":0,"method":"initialize","params":{{"protocolVersion":"{}","capabilities":{{}},"clientInfo":{{"name":"t","version":"1"}}}}}})",
            version));
    }

    boost::asio::io_context io_;
    std::ostringstream log_text_;
    std::shared_ptr<spdlog::logger> log_;
    std::shared_ptr<HostShellBackend> backend_;
    std::shared_ptr<SandboxRouter> router_;
    std::unique_ptr<McpServer> server_;
    std::shared_ptr<McpSession> session_;
};

TEST_F(McpServerTest, InitializeAnswersTheClientsSupportedVersionOrTheLatest) {
    // The official TypeScript SDK's LATEST_PROTOCOL_VERSION and the older revisions it supports.
    for (const std::string version :
         {"2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05", "2024-10-07"}) {
        auto reply = initialize(version);
        EXPECT_EQ(reply.at("result").at("protocolVersion").as_string(), version);
    }
    auto reply = initialize("1999-01-01");
    EXPECT_EQ(reply.at("result").at("protocolVersion").as_string(), "2025-11-25");
    EXPECT_TRUE(reply.at("result").at("capabilities").as_object().contains("tools"));
    EXPECT_EQ(reply.at("id").as_int64(), 0);
}

TEST_F(McpServerTest, PingAnswersAnEmptyResult) {
    auto reply = handle(R"({"jsonrpc":"2.0","id":"p","method":"ping"})");
    EXPECT_TRUE(reply.at("result").as_object().empty());
    EXPECT_EQ(reply.at("id").as_string(), "p");
}

TEST_F(McpServerTest, ToolsListCarriesSchemasAnnotationsAndTheRungAndEgressInForce) {
    initialize();
    auto reply = handle(R"({"jsonrpc":"2.0","id":1,"method":"tools/list"})");
    const auto& tools = reply.at("result").at("tools").as_array();
    ASSERT_EQ(tools.size(), 4u);
    const auto& code = tools[0].as_object();
    EXPECT_EQ(code.at("name").as_string(), "execute_code");
    EXPECT_EQ(code.at("inputSchema").at("required").as_array()[0].as_string(), "code");
    EXPECT_FALSE(code.at("inputSchema").at("additionalProperties").as_bool());
    EXPECT_FALSE(code.at("annotations").at("openWorldHint").as_bool());
    const std::string description(code.at("description").as_string());
    EXPECT_NE(description.find("isolation none"), std::string::npos) << description;
    EXPECT_NE(description.find("egress closed"), std::string::npos) << description;
    EXPECT_TRUE(code.contains("outputSchema"));
    EXPECT_EQ(tools[1].at("name").as_string(), "run_shell");
}

TEST_F(McpServerTest, OpenWorldHintIsTrueOnlyWhenEgressIsNotClosed) {
    kinds::SandboxSettings settings;
    settings.egress_allow = {"pypi.org"};
    build(settings);
    initialize();
    auto reply = handle(R"({"jsonrpc":"2.0","id":1,"method":"tools/list"})");
    for (const auto& tool : reply.at("result").at("tools").as_array()) {
        // Moving a file in or out touches only the sandbox, whatever the guest may reach.
        const bool moves_files = tool.at("name").as_string().ends_with("_file");
        EXPECT_EQ(tool.at("annotations").at("openWorldHint").as_bool(), !moves_files);
        EXPECT_NE(std::string(tool.at("description").as_string()).find("egress allowlist"),
                  std::string::npos);
    }
}

TEST_F(McpServerTest, ExecuteCodeReturnsTheProgramsOutputAsTextAndStructuredContent) {
    initialize();
    auto reply = handle(
        call("2", "execute_code",
             R"j({"code":"import sys\nprint(6*7)\nprint('e', file=sys.stderr)\nsys.exit(4)"})j"));
    const auto& result = reply.at("result").as_object();
    // The program's failure is the call's: its output still comes back in full.
    EXPECT_TRUE(result.at("isError").as_bool()) << json::serialize(result);
    const auto& structured = result.at("structuredContent").as_object();
    EXPECT_EQ(structured.at("exit_code").as_int64(), 4);
    EXPECT_EQ(structured.at("stdout").as_string(), "42\n");
    EXPECT_EQ(structured.at("stderr").as_string(), "e\n");
    EXPECT_EQ(structured.at("backend").as_string(), "host-shell");
    EXPECT_EQ(structured.at("isolation").as_string(), "none");
    EXPECT_EQ(structured.at("egress").as_string(), "closed");
    const std::string text(result.at("content").as_array()[0].at("text").as_string());
    EXPECT_NE(text.find("exit code: 4"), std::string::npos) << text;
}

TEST_F(McpServerTest, ANonZeroExitSetsIsErrorAndAZeroExitDoesNot) {
    for (const std::string version : {"2025-11-25", "2024-11-05"}) {
        initialize(version);
        auto failed = handle(call("2", "run_shell", R"({"command":"echo out; exit 3"})"));
        const auto& failure = failed.at("result").as_object();
        EXPECT_TRUE(failure.at("isError").as_bool()) << version << json::serialize(failure);
        const std::string text(failure.at("content").as_array()[0].at("text").as_string());
        EXPECT_NE(text.find("exit code: 3"), std::string::npos) << text;
        EXPECT_NE(text.find("out"), std::string::npos) << text;
        auto passed = handle(call("3", "run_shell", R"({"command":"true"})"));
        EXPECT_FALSE(passed.at("result").at("isError").as_bool()) << version;
    }
}

TEST_F(McpServerTest, ATimedOutCallIsAnErrorResultSayingItWasStopped) {
    kinds::SandboxSettings settings;
    settings.timeout = Seconds(1.0);
    build(settings);
    initialize();
    const auto started = std::chrono::steady_clock::now();
    auto reply = handle(call("2", "run_shell", R"({"command":"echo begun; sleep 30"})"));
    EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::seconds(20));
    const auto& result = reply.at("result").as_object();
    EXPECT_TRUE(result.at("isError").as_bool()) << json::serialize(result);
    const std::string text(result.at("content").as_array()[0].at("text").as_string());
    EXPECT_NE(text.find("did not finish within 1 seconds"), std::string::npos) << text;
    // What the program printed before it was stopped comes back with the error.
    EXPECT_NE(text.find("output before the timeout:"), std::string::npos) << text;
    EXPECT_NE(text.find("begun"), std::string::npos) << text;
}

TEST_F(McpServerTest, OlderClientsGetTextWithoutStructuredContent) {
    initialize("2024-11-05");
    auto reply = handle(call("2", "run_shell", R"({"command":"echo hi"})"));
    EXPECT_FALSE(reply.at("result").as_object().contains("structuredContent"));
    auto list = handle(R"({"jsonrpc":"2.0","id":3,"method":"tools/list"})");
    EXPECT_FALSE(list.at("result").at("tools").as_array()[0].as_object().contains("outputSchema"));
}

TEST_F(McpServerTest, AnInputFileAbsentFromTheStoreIsAnErrorResultWithAFixedSentence) {
    initialize();
    auto reply =
        handle(call("2", "execute_code", R"j({"code":"print(1)","input_files":["x.csv"]})j"));
    const auto& result = reply.at("result").as_object();
    EXPECT_TRUE(result.at("isError").as_bool());
    const std::string text(result.at("content").as_array()[0].at("text").as_string());
    EXPECT_NE(text.find("'x.csv' is not in the file store"), std::string::npos) << text;
    EXPECT_TRUE(backend_->acquired.empty());
}

TEST_F(McpServerTest, MalformedInputGetsStructuredJsonRpcErrors) {
    auto code_of = [&](std::string text) {
        return handle(std::move(text)).at("error").at("code").as_int64();
    };
    EXPECT_EQ(code_of("{not json"), -32700);
    EXPECT_EQ(code_of("[]"), -32600);
    EXPECT_EQ(code_of("42"), -32600);
    EXPECT_EQ(code_of(R"({"jsonrpc":"1.0","id":1,"method":"ping"})"), -32600);
    EXPECT_EQ(code_of(R"({"jsonrpc":"2.0","id":{"a":1},"method":"ping"})"), -32600);
    EXPECT_EQ(code_of(R"({"jsonrpc":"2.0","id":1,"method":"prompts/list"})"), -32601);
    EXPECT_EQ(code_of(R"({"jsonrpc":"2.0","id":1,"method":"initialize","params":{}})"), -32602);
    EXPECT_EQ(code_of(call("1", "rm_rf", "{}")), -32602);
    EXPECT_EQ(code_of(call("1", "execute_code", "{}")), -32602);
    EXPECT_EQ(code_of(call("1", "execute_code", R"({"code":1})")), -32602);
    EXPECT_EQ(code_of(call("1", "execute_code", R"({"code":"1","input_files":"a"})")), -32602);
    EXPECT_EQ(code_of(call("1", "run_shell", R"({"cmd":"ls"})")), -32602);
    EXPECT_TRUE(backend_->acquired.empty());
}

TEST_F(McpServerTest, NoToolArgumentCanSetTheSandboxKey) {
    initialize();
    for (const auto* member : {"thread_id", "scope", "agent_dir", "key", "call_id"}) {
        auto reply =
            handle(call("1", "run_shell", fmt::format(R"({{"command":"true","{}":"x"}})", member)));
        EXPECT_EQ(reply.at("error").at("code").as_int64(), -32602) << member;
    }
    EXPECT_TRUE(backend_->acquired.empty());
    handle(call("2", "run_shell", R"({"command":"true"})"));
    ASSERT_EQ(backend_->acquired.size(), 1u);
    EXPECT_EQ(backend_->acquired[0].first.scope, "test-scope");
    EXPECT_EQ(backend_->acquired[0].first.thread_id, "session-1");
    EXPECT_EQ(backend_->acquired[0].first.agent_dir, "mcp");
}

TEST_F(McpServerTest, NotificationsAndClientResponsesGetNoReply) {
    EXPECT_FALSE(run_blocking(
        io_, session_->handle(R"({"jsonrpc":"2.0","method":"notifications/initialized"})")));
    EXPECT_TRUE(session_->initialized());
    EXPECT_FALSE(run_blocking(io_, session_->handle(R"({"jsonrpc":"2.0","id":5,"result":{}})")));
    EXPECT_FALSE(run_blocking(
        io_,
        session_->handle(
            R"({"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":99}})")));
}

TEST_F(McpServerTest, CancelledCallSendsNoResponseAndCleansUpItsCallDirectory) {
    initialize();
    std::optional<std::optional<std::string>> reply;
    const auto started = std::chrono::steady_clock::now();
    auto scenario = [&]() -> Task<void> {
        auto executor = co_await boost::asio::this_coro::executor;
        auto long_call = session_->handle(
            call("7", "execute_code",
                 R"j({"code":"open('f','w').write('x')\nimport time\ntime.sleep(30)"})j"));
        boost::asio::co_spawn(
            executor, std::move(long_call),
            [&](std::exception_ptr, std::optional<std::string> answer) { reply = answer; });
        boost::asio::steady_timer timer(executor, std::chrono::milliseconds(400));
        co_await timer.async_wait(boost::asio::use_awaitable);
        auto none = co_await session_->handle(
            R"({"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":7,"reason":"user"}})");
        EXPECT_FALSE(none);
    };
    run_blocking(io_, scenario());
    ASSERT_TRUE(reply.has_value());
    EXPECT_FALSE(reply->has_value()) << **reply;
    EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::seconds(5));
    ASSERT_EQ(backend_->live.size(), 1u);
    const auto base = backend_->live.begin()->second->base_directory();
    EXPECT_TRUE(std::filesystem::is_empty(base));
    // A client's cancellation is normal: one info line, none of the machinery's own words.
    const auto log = log_text_.str();
    std::size_t mentions = 0;
    std::istringstream lines(log);
    for (std::string line; std::getline(lines, line);) {
        if (line.find("request 7") != std::string::npos) {
            ++mentions;
            EXPECT_NE(line.find("[info]"), std::string::npos) << line;
            EXPECT_NE(line.find("was cancelled and cleaned up"), std::string::npos) << line;
        }
        EXPECT_EQ(line.find("[error]"), std::string::npos) << line;
        EXPECT_EQ(line.find("[warning]"), std::string::npos) << line;
    }
    EXPECT_EQ(mentions, 1u) << log;
    for (const char* internal : {"Operation canceled", "asio", "boost", "system:"}) {
        EXPECT_EQ(log.find(internal), std::string::npos) << internal << " in:\n" << log;
    }
}

TEST_F(McpServerTest, ProgressNotificationsFollowTheProgressToken) {
    initialize();
    std::vector<json::object> notes;
    session_->set_message_sink(
        [&](std::string message) { notes.push_back(json::parse(message).as_object()); });
    handle(call("3", "run_shell", R"({"command":"true"})", R"({"progressToken":"tok"})"));
    ASSERT_GE(notes.size(), 3u);
    double last = -1;
    for (const auto& note : notes) {
        EXPECT_EQ(note.at("method").as_string(), "notifications/progress");
        EXPECT_EQ(note.at("params").at("progressToken").as_string(), "tok");
        const double progress = note.at("params").at("progress").to_number<double>();
        EXPECT_GT(progress, last);
        last = progress;
    }
    notes.clear();
    handle(call("4", "run_shell", R"({"command":"true"})"));
    EXPECT_TRUE(notes.empty());
}

TEST_F(McpServerTest, ClosingTheSessionDisposesItsSandboxesAndRefusesFurtherRequests) {
    initialize();
    handle(call("1", "run_shell", R"({"command":"true"})"));
    handle(call("2", "execute_code", R"j({"code":"print(1)"})j"));
    EXPECT_EQ(backend_->live.size(), 2u);
    run_blocking(io_, session_->close());
    ASSERT_EQ(backend_->purged.size(), 1u);
    EXPECT_EQ(backend_->purged[0],
              std::make_pair(std::string("test-scope"), std::string("session-1")));
    EXPECT_TRUE(backend_->live.empty());
    EXPECT_NE(log_text_.str().find("session session-1 ended: disposed 2 sandbox(es)"),
              std::string::npos)
        << log_text_.str();
    auto reply = handle(R"({"jsonrpc":"2.0","id":9,"method":"ping"})");
    EXPECT_EQ(reply.at("error").at("code").as_int64(), -32600);
}

}  // namespace
}  // namespace maf_sandbox::mcp
