// The per-session sandbox cap (--max-session-sandboxes) counts the distinct sandboxes a session
// holds, not its tool calls: a conversation's calls reuse its sandbox and take no second place,
// a second kind's sandbox is a second place, and a call-scoped sandbox gives its place back when
// its call ends.
#include <gtest/gtest.h>

#include <boost/json/serialize.hpp>

#include "maf_sandbox/core/errors.hpp"
#include "maf_sandbox/kinds/codeact.hpp"
#include "maf_sandbox/kinds/sandbox_allowance.hpp"
#include "mcp_http_fixture.hpp"

namespace maf_sandbox::mcp {
namespace {

std::string tool_call(int id, std::string_view tool, std::string_view arguments) {
    return fmt::format(
        R"({{"jsonrpc":"2.0","id":{},"method":"tools/call","params":{{"name":"{}","arguments":{}}}}})",
        id, tool, arguments);
}

class McpSessionCapOverHttpTest : public McpHttpTest {
  protected:
    McpSessionCapOverHttpTest() { max_session_sandboxes_ = 1; }

    json::object call(const std::string& session, int id) {
        auto reply = send(
            "POST",
            tool_call(id, "run_shell",
                      fmt::format(R"({{"command":"echo call-{} >> ../calls; cat ../calls"}})", id)),
            session);
        EXPECT_EQ(reply.status, 200) << reply.body;
        return json::parse(reply.body).at("result").as_object();
    }
};

TEST_F(McpSessionCapOverHttpTest, RepeatedCallsOfOneConversationHoldOneSandboxUnderACapOfOne) {
    auto init = send("POST", kInitialize);
    const auto session = init.headers.get("Mcp-Session-Id");
    ASSERT_TRUE(session);
    std::string expected;
    for (int i = 1; i <= 4; ++i) {
        const auto result = call(*session, i);
        ASSERT_FALSE(result.at("isError").as_bool()) << json::serialize(result);
        expected += fmt::format("call-{}\n", i);
        // Each call sees every earlier call's line: the same sandbox served them all.
        EXPECT_EQ(result.at("structuredContent").at("stdout").as_string(), expected);
    }
    EXPECT_EQ(backend_->acquired.size(), 4u);
    EXPECT_EQ(backend_->created, 1);
    EXPECT_EQ(backend_->live.size(), 1u);

    // Another session is another conversation: a sandbox and an allowance of its own.
    auto other = send("POST", kInitialize);
    const auto other_session = other.headers.get("Mcp-Session-Id");
    ASSERT_TRUE(other_session);
    const auto result = call(*other_session, 9);
    EXPECT_FALSE(result.at("isError").as_bool()) << json::serialize(result);
    EXPECT_EQ(result.at("structuredContent").at("stdout").as_string(), "call-9\n");
    EXPECT_EQ(backend_->created, 2);
}

// A session over both kinds, driven through McpSession::handle.
class McpSessionCapTest : public ::testing::Test {
  protected:
    void build(std::size_t cap, IsolationScope scope) {
        log_ = std::make_shared<spdlog::logger>(
            "mcp-cap-test", std::make_shared<spdlog::sinks::ostream_sink_mt>(log_text_));
        backend_ = std::make_shared<testing::HostShellBackend>();
        SandboxRouterOptions options;
        options.min_isolation = Isolation::none;
        options.log = log_;
        router_ = std::make_shared<SandboxRouter>(
            std::vector<std::shared_ptr<SandboxBackend>>{backend_}, options);
        kinds::SandboxSettings settings;
        settings.isolation_scope = scope;
        kinds::CodeActConfig codeact;
        codeact.sandbox = settings;
        McpServerConfig config;
        config.max_session_sandboxes = cap;
        server_ = std::make_unique<McpServer>(
            config, router_,
            std::make_shared<kinds::CodeActTool>(router_, codeact, nullptr, std::nullopt, log_),
            std::make_shared<kinds::ShellTool>(router_, kinds::ShellConfig{settings}, log_), log_);
        session_ = server_->open_session("session-cap");
        handle(std::string(kInitialize));
    }

    json::object handle(std::string text) {
        auto reply = run_blocking(io_, session_->handle(std::move(text)));
        EXPECT_TRUE(reply);
        return reply ? json::parse(*reply).as_object() : json::object{};
    }

    // The call's result, and whether it was refused.
    bool refused(int id, std::string_view tool, std::string_view arguments) {
        auto reply = handle(tool_call(id, tool, arguments));
        const auto& result = reply.at("result").as_object();
        if (!result.at("isError").as_bool()) {
            return false;
        }
        const std::string text(result.at("content").at(0).at("text").as_string());
        EXPECT_NE(text.find("already holds"), std::string::npos) << text;
        EXPECT_NE(text.find("--max-session-sandboxes"), std::string::npos) << text;
        return true;
    }

    boost::asio::io_context io_;
    std::ostringstream log_text_;
    std::shared_ptr<spdlog::logger> log_;
    std::shared_ptr<testing::HostShellBackend> backend_;
    std::shared_ptr<SandboxRouter> router_;
    std::unique_ptr<McpServer> server_;
    std::shared_ptr<McpSession> session_;
};

constexpr std::string_view kShell = R"({"command":"true"})";
constexpr std::string_view kCode = R"j({"code":"print(1)"})j";

TEST_F(McpSessionCapTest, ASecondKindIsASecondSandboxAndIsRefusedBeyondTheCap) {
    build(1, IsolationScope::conversation);
    EXPECT_FALSE(refused(1, "run_shell", kShell));
    EXPECT_FALSE(refused(2, "run_shell", kShell));
    // execute_code needs a sandbox of its own kind: a second place, over a cap of 1.
    EXPECT_TRUE(refused(3, "execute_code", kCode));
    EXPECT_EQ(backend_->acquired.size(), 2u) << "a refused call acquires nothing";
    // The held sandbox still serves its kind.
    EXPECT_FALSE(refused(4, "run_shell", kShell));
    EXPECT_EQ(backend_->created, 1);
}

TEST_F(McpSessionCapTest, TwoKindsFitACapOfTwoAndKeepFittingIt) {
    build(2, IsolationScope::conversation);
    for (int i = 0; i < 3; ++i) {
        EXPECT_FALSE(refused(10 + i, "run_shell", kShell));
        EXPECT_FALSE(refused(20 + i, "execute_code", kCode));
    }
    EXPECT_EQ(backend_->created, 2);
    EXPECT_EQ(backend_->acquired.size(), 6u);
}

TEST_F(McpSessionCapTest, ACallScopedSandboxGivesItsPlaceBackWhenItsCallEnds) {
    build(1, IsolationScope::call);
    for (int i = 0; i < 3; ++i) {
        EXPECT_FALSE(refused(30 + i, "run_shell", kShell));
        EXPECT_FALSE(refused(40 + i, "execute_code", kCode));
    }
    EXPECT_EQ(backend_->created, 6) << "one sandbox per call at call scope";
    EXPECT_TRUE(backend_->live.empty());
}

TEST(SandboxAllowanceTest, CountsDistinctSlotsNotClaims) {
    auto allowance = std::make_shared<kinds::SandboxAllowance>(2);
    auto first = allowance->claim("a");
    ASSERT_TRUE(first);
    // A second acquire of the same slot in flight costs no second place.
    auto again = allowance->claim("a");
    ASSERT_TRUE(again);
    EXPECT_EQ(allowance->in_use(), 1u);
    first->settle();
    again->settle();
    EXPECT_EQ(allowance->held(), 1u);
    // Held: reusing it is always admitted, however often.
    for (int i = 0; i < 5; ++i) {
        auto reuse = allowance->claim("a");
        ASSERT_TRUE(reuse);
        reuse->settle();
    }
    EXPECT_EQ(allowance->in_use(), 1u);
    auto second = allowance->claim("b");
    ASSERT_TRUE(second);
    EXPECT_FALSE(allowance->claim("c")) << "one held plus one new acquire fill a cap of 2";
    EXPECT_TRUE(allowance->claim("a")) << "a held slot still costs nothing at the cap";
    second.reset();  // that acquire failed: its place is back
    auto third = allowance->claim("c");
    ASSERT_TRUE(third);
    third->settle();
    EXPECT_EQ(allowance->held(), 2u);
    EXPECT_FALSE(allowance->claim("d"));
    allowance->release("c");  // a call-scoped sandbox was disposed
    EXPECT_EQ(allowance->held(), 1u);
    EXPECT_TRUE(allowance->claim("d"));
    EXPECT_THROW(kinds::SandboxAllowance(0), InvalidArgument);
}

TEST(SandboxAllowanceTest, AFailedAcquireOfAHeldSlotKeepsItHeld) {
    auto allowance = std::make_shared<kinds::SandboxAllowance>(1);
    auto first = allowance->claim("a");
    ASSERT_TRUE(first);
    first->settle();
    { auto failed = allowance->claim("a"); }
    EXPECT_EQ(allowance->held(), 1u);
    EXPECT_FALSE(allowance->claim("b"));
}

TEST(SandboxAllowanceTest, SlotsOfDifferentKeysOrKindsNeverReadAlike) {
    SandboxKey key;
    key.scope = "s";
    key.thread_id = "t";
    SandboxKey shifted = key;
    shifted.scope = "st";
    shifted.thread_id = "";
    EXPECT_NE(kinds::sandbox_slot(key, "shell"), kinds::sandbox_slot(shifted, "shell"));
    EXPECT_NE(kinds::sandbox_slot(key, "shell"), kinds::sandbox_slot(key, "codeact"));
    SandboxKey call = key;
    call.call_id = "0123456789ab";
    EXPECT_NE(kinds::sandbox_slot(key, "shell"), kinds::sandbox_slot(call, "shell"));
    EXPECT_EQ(kinds::sandbox_slot(key, "shell"), kinds::sandbox_slot(SandboxKey(key), "shell"));
}

}  // namespace
}  // namespace maf_sandbox::mcp
