// What the MCP HTTP endpoint admits: the Host and Origin headers read whole and exactly (DNS
// rebinding tricks refused), the bearer token on every request, no non-loopback bind without an
// explicit allowance. Each refusal follows a benign control that passes on the same server. (The
// per-session sandbox cap has its own file, mcp_session_cap_test.cpp.)
#include <boost/asio/io_context.hpp>
#include <boost/json/serialize.hpp>

#include "maf_sandbox/core/errors.hpp"
#include "mcp_http_fixture.hpp"

namespace maf_sandbox::mcp {
namespace {

using Headers = std::vector<std::pair<std::string, std::string>>;

class McpHttpGuardTest : public McpHttpTest {
  protected:
    std::string authorization() const { return "Bearer " + token_; }
    std::string host() const { return fmt::format("127.0.0.1:{}", port_); }

    int status_with(Headers headers) { return send_with(headers, kInitialize).status; }

    // The headers of an admitted request, with one field replaced (or dropped when the value is
    // nullopt) and any extra fields appended.
    Headers admitted_but(const std::string& name, std::optional<std::string> value,
                         Headers extra = {}) const {
        Headers headers{{"Host", host()}, {"Authorization", authorization()}};
        for (auto it = headers.begin(); it != headers.end(); ++it) {
            if (it->first == name) {
                headers.erase(it);
                break;
            }
        }
        if (value) {
            headers.emplace_back(name, *value);
        }
        headers.insert(headers.end(), extra.begin(), extra.end());
        return headers;
    }
};

TEST_F(McpHttpGuardTest, OriginTricksAreRefusedAfterTheServersOwnOriginPasses) {
    const auto port = std::to_string(port_);
    // Controls: no Origin (a non-browser client), and the server's own origin, under each name
    // the Host header may give it.
    EXPECT_EQ(status_with(admitted_but("Origin", std::nullopt)), 200);
    EXPECT_EQ(status_with(admitted_but("Origin", "http://127.0.0.1:" + port)), 200);
    EXPECT_EQ(status_with({{"Host", "localhost:" + port},
                           {"Authorization", authorization()},
                           {"Origin", "http://localhost:" + port}}),
              200);
    // Another loopback page (another local program's, on another port or address, or the same
    // server under another name than the request's Host) is not this server's own.
    const auto other_port = std::to_string(port_ == 65535 ? 1 : port_ + 1);
    for (const auto& origin : std::vector<std::string>{
             "http://127.0.0.1:" + other_port,
             "http://localhost:3000",
             "http://127.0.0.1",
             "http://localhost:" + port,
             "http://[::1]:" + port,
             "http://127.9.8.7:" + port,
             "https://127.0.0.1:" + port,
             "https://localhost",
             "http://127.0.0.1:" + port + ":" + port,
         }) {
        EXPECT_EQ(status_with(admitted_but("Origin", origin)), 403) << origin;
    }
    for (const auto& origin : std::vector<std::string>{
             "http://127.0.0.1.evil.example",
             "http://127.0.0.1.evil.example:" + port,
             "http://localhost.evil.example",
             "http://evil.example",
             "http://[::1].evil",
             "http://127.0.0.1@evil.example",
             "http://evil.example@127.0.0.1",
             "http://127.0.0.1:80@evil.example",
             "http://LOCALHOST",
             "http://Localhost:" + port,
             "http://localhost.",
             "http://127.0.0.1.",
             "http://0x7f.0.0.1",
             "http://127.1",
             "http://2130706433",
             "http://0177.0.0.1",
             "http://[::ffff:127.0.0.1]",
             "http://localhost/",
             "http://localhost:" + port + "/path",
             "http://localhost:99999",
             "ftp://localhost",
             "null",
             "",
             "localhost",
         }) {
        EXPECT_EQ(status_with(admitted_but("Origin", origin)), 403) << origin;
    }
    // Two Origin fields: which would a browser have sent? Refused.
    EXPECT_EQ(status_with(admitted_but("Origin", "http://127.0.0.1:" + port,
                                       {{"Origin", "http://evil.example"}})),
              403);
    EXPECT_TRUE(backend_->acquired.empty());
}

TEST_F(McpHttpGuardTest, HostTricksAndAWrongPortAreRefusedAfterLoopbackHostsPass) {
    const auto port = std::to_string(port_);
    for (const auto& value : std::vector<std::string>{"127.0.0.1:" + port, "localhost:" + port,
                                                      "[::1]:" + port, "127.0.0.53:" + port}) {
        EXPECT_EQ(status_with(admitted_but("Host", value)), 200) << value;
    }
    const auto other_port = std::to_string(port_ == 65535 ? 1 : port_ + 1);
    for (const auto& value : std::vector<std::string>{
             "127.0.0.1.evil.example:" + port,
             "localhost.evil.example:" + port,
             "evil.example:" + port,
             "[::1].evil:" + port,
             "127.0.0.1@evil.example:" + port,
             "LOCALHOST:" + port,
             "localhost.:" + port,
             "127.0.0.1.:" + port,
             "0x7f.0.0.1:" + port,
             "127.1:" + port,
             "10.0.0.1:" + port,
             "::1:" + port,
             "127.0.0.1:" + other_port,
             "localhost:" + other_port,
             "127.0.0.1",
             "127.0.0.1:" + port + "/",
             "127.0.0.1:+" + port,
             "",
         }) {
        EXPECT_EQ(status_with(admitted_but("Host", value)), 403) << value;
    }
    EXPECT_EQ(status_with(admitted_but("Host", host(), {{"Host", "evil.example:" + port}})), 403);
    EXPECT_TRUE(backend_->acquired.empty());
}

TEST_F(McpHttpGuardTest, EveryRequestNeedsTheBearerToken) {
    // Control: the right token opens a session, and a call in it runs.
    auto init = send("POST", kInitialize);
    ASSERT_EQ(init.status, 200) << init.body;
    const auto session = init.headers.get("Mcp-Session-Id");
    ASSERT_TRUE(session);

    const auto refused = send_with(admitted_but("Authorization", std::nullopt), kInitialize);
    EXPECT_EQ(refused.status, 401);
    const auto challenge = refused.headers.get("WWW-Authenticate");
    ASSERT_TRUE(challenge);
    EXPECT_EQ(challenge->rfind("Bearer", 0), 0u) << *challenge;

    for (const auto& value : std::vector<std::string>{
             "Bearer " + token_.substr(0, token_.size() - 1) + (token_.back() == 'a' ? "b" : "a"),
             "Bearer " + token_.substr(0, 16),
             "Bearer " + token_ + "0",
             "Bearer  " + token_,
             "Basic " + token_,
             "Token " + token_,
             token_,
             "Bearer",
             "Bearer ",
             "",
         }) {
        EXPECT_EQ(status_with(admitted_but("Authorization", value)), 401) << value;
    }
    EXPECT_EQ(status_with(admitted_but("Authorization", authorization(),
                                       {{"Authorization", "Bearer wrong"}})),
              401);
    // The scheme is case-insensitive (RFC 9110); the token is not.
    EXPECT_EQ(status_with(admitted_but("Authorization", "bearer " + token_)), 200);

    // Within a session too: a call without the token runs nothing.
    const std::string call =
        R"({"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"run_shell","arguments":{"command":"true"}}})";
    auto anonymous_call = send_with(
        admitted_but("Authorization", std::nullopt, {{"Mcp-Session-Id", *session}}), call);
    EXPECT_EQ(anonymous_call.status, 401);
    EXPECT_TRUE(backend_->acquired.empty());
    auto anonymous_delete =
        send_with(admitted_but("Authorization", std::nullopt, {{"Mcp-Session-Id", *session}}), "");
    EXPECT_EQ(anonymous_delete.status, 401);
    EXPECT_EQ(send("POST", call, session).status, 200);
    EXPECT_EQ(backend_->acquired.size(), 1u);
}

TEST(McpHttpBindTest, ANonLoopbackBindIsRefusedWithoutAllowRemoteAndNoTokenIsRefusedAlways) {
    boost::asio::io_context io;
    auto log = std::make_shared<spdlog::logger>("mcp-bind-test");
    auto backend = std::make_shared<testing::HostShellBackend>();
    SandboxRouterOptions router_options;
    router_options.min_isolation = Isolation::none;
    router_options.log = log;
    auto router = std::make_shared<SandboxRouter>(
        std::vector<std::shared_ptr<SandboxBackend>>{backend}, router_options);
    McpServer server(McpServerConfig{}, router, nullptr,
                     std::make_shared<kinds::ShellTool>(router, kinds::ShellConfig{}, log), log);

    McpHttpOptions options;
    options.token = generate_bearer_token();
    // Controls: loopback binds start.
    for (const auto& host : std::vector<std::string>{"127.0.0.1", "::1", "localhost"}) {
        options.host = host;
        McpHttpServer http(io.get_executor(), server, options);
        EXPECT_GT(http.start(), 0) << host;
    }
    for (const auto& host :
         std::vector<std::string>{"0.0.0.0", "::", "10.1.2.3", "example.com", "127.0.0.1.nip.io"}) {
        options.host = host;
        EXPECT_THROW(McpHttpServer(io.get_executor(), server, options), InvalidArgument) << host;
    }
    // With the explicit allowance a wildcard bind starts (the token still guards it).
    options.host = "0.0.0.0";
    options.allow_remote = true;
    McpHttpServer remote(io.get_executor(), server, options);
    EXPECT_GT(remote.start(), 0);

    options.host = "127.0.0.1";
    options.allow_remote = false;
    options.token.clear();
    EXPECT_THROW(McpHttpServer(io.get_executor(), server, options), InvalidArgument);
}

TEST(McpHttpTokenTest, GeneratedTokensAreLongRandomAndDistinct) {
    const auto a = generate_bearer_token();
    const auto b = generate_bearer_token();
    EXPECT_EQ(a.size(), 64u);
    EXPECT_EQ(a.find_first_not_of("0123456789abcdef"), std::string::npos);
    EXPECT_NE(a, b);
    EXPECT_TRUE(bearer_token_matches("Bearer " + a, a));
    EXPECT_FALSE(bearer_token_matches("Bearer " + b, a));
    EXPECT_FALSE(bearer_token_matches("Bearer ", ""));
}

}  // namespace
}  // namespace maf_sandbox::mcp
