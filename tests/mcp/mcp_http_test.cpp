// The streamable HTTP transport at /mcp over loopback: sessions by Mcp-Session-Id, JSON responses,
// 202 for notifications, DELETE ending a session and disposing its sandboxes.
#include "mcp_http_fixture.hpp"

namespace maf_sandbox::mcp {
namespace {

namespace json = boost::json;

TEST_F(McpHttpTest, ASessionRunsCallsAndDeleteDisposesItsSandboxes) {
    auto init = send("POST", kInitialize);
    ASSERT_EQ(init.status, 200) << init.body;
    const auto session = init.headers.get("Mcp-Session-Id");
    ASSERT_TRUE(session);
    EXPECT_EQ(json::parse(init.body).at("result").at("protocolVersion").as_string(), "2025-06-18");

    auto note = send("POST", R"({"jsonrpc":"2.0","method":"notifications/initialized"})", session);
    EXPECT_EQ(note.status, 202);

    auto call = send(
        "POST",
        R"({"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"run_shell","arguments":{"command":"echo via-http"}}})",
        session);
    ASSERT_EQ(call.status, 200);
    const auto result = json::parse(call.body).at("result");
    EXPECT_EQ(result.at("structuredContent").at("stdout").as_string(), "via-http\n");
    ASSERT_EQ(backend_->acquired.size(), 1u);
    EXPECT_EQ(backend_->acquired[0].first.thread_id, *session);

    auto end = send("DELETE", "", session);
    EXPECT_EQ(end.status, 200);
    ASSERT_EQ(backend_->purged.size(), 1u);
    EXPECT_EQ(backend_->purged[0].second, *session);
    EXPECT_TRUE(backend_->live.empty());
    EXPECT_EQ(http_->session_count(), 0u);

    auto stale = send("POST", R"({"jsonrpc":"2.0","id":3,"method":"ping"})", session);
    EXPECT_EQ(stale.status, 404);
}

TEST_F(McpHttpTest, RequestsWithoutASessionOrOnAnotherPathAreRefused) {
    EXPECT_EQ(send("POST", R"({"jsonrpc":"2.0","id":3,"method":"ping"})").status, 400);
    EXPECT_EQ(send("POST", "{oops").status, 400);
    EXPECT_EQ(send("GET", "").status, 405);
    net::HttpRequest other;
    other.method = "POST";
    other.target = url_ + "/elsewhere";
    other.body = kInitialize;
    EXPECT_EQ(drive(io_, client_->send(other)).status, 404);
    net::HttpRequest foreign;
    foreign.method = "POST";
    foreign.target = url_;
    foreign.body = kInitialize;
    foreign.headers.set("Origin", "http://evil.example");
    EXPECT_EQ(drive(io_, client_->send(foreign)).status, 403);
    EXPECT_TRUE(backend_->acquired.empty());
}

TEST_F(McpHttpTest, StoppingTheServerEndsEverySessionAndDisposes) {
    auto init = send("POST", kInitialize);
    const auto session = init.headers.get("Mcp-Session-Id");
    ASSERT_TRUE(session);
    send(
        "POST",
        R"({"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"run_shell","arguments":{"command":"true"}}})",
        session);
    drive(io_, stopped(*http_));
    ASSERT_EQ(backend_->purged.size(), 1u);
    EXPECT_EQ(backend_->purged[0].second, *session);
}

}  // namespace
}  // namespace maf_sandbox::mcp
