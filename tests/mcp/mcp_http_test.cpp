// The streamable HTTP transport at /mcp over loopback: sessions by Mcp-Session-Id, JSON responses,
// server-sent events for a call that asks for progress, 202 for notifications, DELETE ending a
// session and disposing its sandboxes.
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

// The `data:` of each event of a text/event-stream body, parsed.
std::vector<json::object> events_of(const std::string& body) {
    std::vector<json::object> events;
    std::size_t at = 0;
    while ((at = body.find("data: ", at)) != std::string::npos) {
        const auto end = body.find('\n', at);
        events.push_back(json::parse(body.substr(at + 6, end - at - 6)).as_object());
        at = end;
    }
    return events;
}

constexpr const char* kCallWithProgress =
    R"({"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"run_shell","arguments":{"command":"echo streamed"},"_meta":{"progressToken":"p7"}}})";

TEST_F(McpHttpTest, ACallAskingForProgressIsAnsweredAsServerSentEvents) {
    auto init = send("POST", kInitialize);
    const auto session = init.headers.get("Mcp-Session-Id");
    ASSERT_TRUE(session);
    auto call = send("POST", kCallWithProgress, session);
    ASSERT_EQ(call.status, 200) << call.body;
    EXPECT_EQ(call.headers.get("Content-Type"), "text/event-stream");
    EXPECT_EQ(call.headers.get("Mcp-Session-Id"), session);
    const auto events = events_of(call.body);
    ASSERT_GE(events.size(), 2u) << call.body;
    // Progress first, each naming the request's token, then the response, which ends the body.
    for (std::size_t i = 0; i + 1 < events.size(); ++i) {
        EXPECT_EQ(events[i].at("method").as_string(), "notifications/progress") << call.body;
        EXPECT_EQ(events[i].at("params").at("progressToken").as_string(), "p7");
    }
    const auto& answer = events.back();
    EXPECT_EQ(answer.at("id").as_int64(), 7);
    EXPECT_EQ(answer.at("result").at("structuredContent").at("stdout").as_string(), "streamed\n");
    // The connection stays usable for the session's next request.
    auto ping = send("POST", R"({"jsonrpc":"2.0","id":8,"method":"ping"})", session);
    EXPECT_EQ(ping.status, 200);
    EXPECT_EQ(ping.headers.get("Content-Type"), "application/json");
}

TEST_F(McpHttpTest, AClientThatAcceptsOnlyJsonGetsJsonEvenWhenItAsksForProgress) {
    auto init = send("POST", kInitialize);
    const auto session = init.headers.get("Mcp-Session-Id");
    ASSERT_TRUE(session);
    net::HttpRequest request;
    request.method = "POST";
    request.target = url_;
    request.body = kCallWithProgress;
    request.headers.set("Content-Type", "application/json");
    request.headers.set("Accept", "application/json");
    request.headers.set("Mcp-Session-Id", *session);
    request.headers.set("Authorization", "Bearer " + token_);
    auto call = drive(io_, client_->send(std::move(request)));
    ASSERT_EQ(call.status, 200) << call.body;
    EXPECT_EQ(call.headers.get("Content-Type"), "application/json");
    EXPECT_EQ(json::parse(call.body).at("id").as_int64(), 7);
}

TEST_F(McpHttpTest, AnEventStreamIsRefusedWithoutTheTokenLikeAnyRequest) {
    auto init = send("POST", kInitialize);
    const auto session = init.headers.get("Mcp-Session-Id");
    ASSERT_TRUE(session);
    auto call = send_with({{"Authorization", "Bearer wrong"}, {"Mcp-Session-Id", *session}},
                          kCallWithProgress);
    EXPECT_EQ(call.status, 401);
    EXPECT_EQ(backend_->acquired.size(), 0u);
}

}  // namespace
}  // namespace maf_sandbox::mcp
