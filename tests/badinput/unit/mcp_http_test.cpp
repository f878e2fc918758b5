// The MCP streamable HTTP transport fed malformed, wrongly typed and oversized requests: JSON-RPC
// errors (or a 4xx from the HTTP layer), never a 5xx or a dropped connection, and the server keeps
// serving afterwards.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <atomic>
#include <boost/asio/io_context.hpp>
#include <boost/json/parse.hpp>
#include <chrono>
#include <thread>

#include "maf_sandbox/mcp/http_transport.hpp"
#include "maf_sandbox/net/http_client.hpp"
#include "mcp_harness.hpp"
#include "path_battery.hpp"

namespace maf_sandbox::badinput {
namespace {

namespace json = boost::json;

// The transport refuses to serve without a token; these cases are about the body, so every request
// carries the right one.
constexpr const char* kToken = "bad-input-test-token";

class McpHttpBadInput : public ::testing::Test {
  protected:
    void SetUp() override {
        mcp::McpHttpOptions http_options;
        http_options.token = kToken;
        http_ = std::make_unique<mcp::McpHttpServer>(io_.get_executor(), *harness_.server,
                                                     http_options);
        const auto port = http_->start();
        base_ = "http://127.0.0.1:" + std::to_string(port);
        net::HttpClientOptions options;
        options.proxy = net::ProxySettings{};
        client_ = std::make_unique<net::HttpClient>(io_.get_executor(), options);
        const auto reply = post(kInitialize);
        ASSERT_EQ(reply.status, 200) << reply.body;
        session_ = reply.headers.get("Mcp-Session-Id").value_or("");
        ASSERT_FALSE(session_.empty());
    }
    void TearDown() override {
        client_.reset();
        drive(io_, http_->stop());
    }

    net::HttpResponse send(std::string method, std::string body, bool with_session = true,
                           std::string content_type = "application/json",
                           std::string path = "/mcp") {
        net::HttpRequest request;
        request.method = std::move(method);
        request.target = base_ + path;
        request.headers.set("Content-Type", std::move(content_type));
        request.headers.set("Accept", "application/json, text/event-stream");
        request.headers.set("Authorization", std::string("Bearer ") + kToken);
        if (with_session && !session_.empty()) {
            request.headers.set("Mcp-Session-Id", session_);
        }
        request.body = std::move(body);
        const std::string what = request.method + " " + path;
        try {
            return drive(io_, client_->send(std::move(request)));
        } catch (const net::NetError& e) {
            ADD_FAILURE() << what << ": no HTTP answer: " << e.what();
            return net::HttpResponse{0, {}, {}, {}};
        }
    }
    net::HttpResponse post(std::string body) { return send("POST", std::move(body)); }

    static std::int64_t error_code(const net::HttpResponse& r) {
        boost::system::error_code ec;
        const auto value = json::parse(r.body, ec);
        if (ec || !value.is_object() || !value.as_object().contains("error")) {
            ADD_FAILURE() << "not a JSON-RPC error (" << r.status << "): " << r.body.substr(0, 200);
            return 0;
        }
        return value.at("error").at("code").as_int64();
    }

    void expect_still_serving() {
        const auto ping = post(R"({"jsonrpc":"2.0","id":"alive","method":"ping"})");
        EXPECT_EQ(ping.status, 200) << ping.body;
        EXPECT_NE(ping.body.find("\"result\""), std::string::npos) << ping.body;
    }

    // Raw bytes over TCP to the server (what no client library sends); the whole answer.
    std::string raw_exchange(const std::string& bytes) {
        const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0) {
            return {};
        }
        timeval timeout{5, 0};
        ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
        sockaddr_in address{};
        address.sin_family = AF_INET;
        address.sin_port = htons(http_->port());
        address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        std::string answer;
        std::atomic<bool> done{false};
        // The server runs on io_, which this thread drives: exchange on another thread.
        std::thread peer([&] {
            if (::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0) {
                ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
                ::shutdown(fd, SHUT_WR);
                char buffer[4096];
                for (;;) {
                    const auto n = ::recv(fd, buffer, sizeof buffer, 0);
                    if (n <= 0) {
                        break;
                    }
                    answer.append(buffer, static_cast<std::size_t>(n));
                }
            }
            done = true;
        });
        while (!done) {
            io_.restart();
            io_.run_for(std::chrono::milliseconds(10));
        }
        peer.join();
        ::close(fd);
        io_.restart();
        return answer;
    }

    static void expect_json_body(const std::string& answer, const std::string& what) {
        const auto head_end = answer.find("\r\n\r\n");
        ASSERT_NE(head_end, std::string::npos) << what << ": " << answer.substr(0, 200);
        const auto head = answer.substr(0, head_end);
        EXPECT_NE(head.find("json"), std::string::npos) << what << ": " << head;
        boost::system::error_code ec;
        const auto body = json::parse(answer.substr(head_end + 4), ec);
        EXPECT_TRUE(!ec && body.is_object()) << what << ": " << answer.substr(0, 300);
    }

    boost::asio::io_context io_;
    McpHarness harness_;
    std::unique_ptr<mcp::McpHttpServer> http_;
    std::unique_ptr<net::HttpClient> client_;
    std::string base_;
    std::string session_;
};

TEST_F(McpHttpBadInput, EachMalformedMessageGetsItsJsonRpcError) {
    for (const auto& bad : bad_messages()) {
        const auto reply = post(bad.text);
        EXPECT_TRUE(reply.status == 200 || reply.status == 400)
            << bad.name << ": HTTP " << reply.status << " " << reply.body.substr(0, 200);
        EXPECT_EQ(error_code(reply), bad.code) << bad.name << ": " << reply.body.substr(0, 200);
    }
    expect_still_serving();
}

TEST_F(McpHttpBadInput, WrongContentTypesAnEmptyBodyAndOtherMethodsAreRefusedWithoutA5xx) {
    for (const auto* type : {"text/plain", "application/x-www-form-urlencoded", ""}) {
        SCOPED_TRACE(std::string("content type ") + type);
        const auto reply = send("POST", "a=1&b=2", true, type);
        EXPECT_EQ(reply.status, 400) << type << ": " << reply.body.substr(0, 200);
        EXPECT_EQ(error_code(reply), -32700) << type;
    }
    EXPECT_EQ(error_code(post("")), -32700);
    // A control character in a header is malformed HTTP: the HTTP layer answers 400 in JSON (no
    // handler runs); the server itself carries on.
    const auto answer = raw_exchange(
        "POST /mcp HTTP/1.1\r\nHost: x\r\nContent-Type: \x01\x02\r\n"
        "Content-Length: 2\r\n\r\n{}");
    EXPECT_TRUE(answer.starts_with("HTTP/1.1 400")) << answer.substr(0, 200);
    expect_json_body(answer, "a control character in a header");
    for (const auto* method : {"GET", "PUT", "PATCH", "OPTIONS"}) {
        SCOPED_TRACE(method);
        const auto reply = send(method, "{}");
        EXPECT_EQ(reply.status, 405) << method;
    }
    SCOPED_TRACE("paths");
    EXPECT_EQ(send("POST", "{}", true, "application/json", "/mcp/../etc").status, 404);
    EXPECT_EQ(send("POST", "{}", true, "application/json", "/%00").status, 404);
    expect_still_serving();
}

TEST_F(McpHttpBadInput, SessionAndVersionHeadersOfTheWrongShapeAreJsonRpcErrors) {
    const auto ping = std::string(R"({"jsonrpc":"2.0","id":1,"method":"ping"})");
    // No session header, an unknown one, and one of 4 KiB of junk.
    auto no_session = send("POST", ping, false);
    EXPECT_EQ(no_session.status, 400);
    EXPECT_EQ(error_code(no_session), -32000);
    session_ = "not-a-session";
    auto unknown = post(ping);
    EXPECT_EQ(unknown.status, 404);
    EXPECT_EQ(error_code(unknown), -32001);
    session_ = std::string(4096, 'z');
    EXPECT_EQ(post(ping).status, 404);

    net::HttpRequest request;
    request.method = "POST";
    request.target = base_ + "/mcp";
    request.headers.set("Content-Type", "application/json");
    request.headers.set("Authorization", std::string("Bearer ") + kToken);
    request.headers.set("MCP-Protocol-Version", std::string(300, '9'));
    request.body = kInitialize;
    const auto bad_version = drive(io_, client_->send(std::move(request)));
    EXPECT_EQ(bad_version.status, 400);
    EXPECT_EQ(error_code(bad_version), -32600);
    EXPECT_LT(bad_version.body.size(), 400u) << "the error echoes the whole header";
}

TEST_F(McpHttpBadInput, ABodyOverTheLimitIs413AndAnOversizedMessageUnderItIsAnswered) {
    // The server answers 413 as soon as the headers announce the size and closes; a client still
    // writing the body may see that as a broken pipe instead of reading the 413.
    try {
        net::HttpRequest request;
        request.method = "POST";
        request.target = base_ + "/mcp";
        request.headers.set("Content-Type", "application/json");
        request.headers.set("Authorization", std::string("Bearer ") + kToken);
        request.body = std::string((64u << 20) + 1, ' ');
        EXPECT_EQ(drive(io_, client_->send(std::move(request))).status, 413);
    } catch (const net::NetError& e) {
        EXPECT_FALSE(e.request_sent()) << e.what();
    }
    const std::string big(8u << 20, 'x');
    const auto under =
        post(R"({"jsonrpc":"2.0","id":5,"method":"no-such-method","params":{"p":")" + big + "\"}}");
    EXPECT_EQ(error_code(under), -32601);
    EXPECT_LT(under.body.size(), 400u) << "the error echoes the oversized input";
    expect_still_serving();
}

TEST_F(McpHttpBadInput, TheHttpLayersOwnRefusalsAreJsonToo) {
    const auto headers = raw_exchange(
        "GET /mcp HTTP/1.1\r\nHost: x\r\nX: " + std::string(128u << 10, 'h') + "\r\n\r\n");
    EXPECT_TRUE(headers.starts_with("HTTP/1.1 431")) << headers.substr(0, 200);
    expect_json_body(headers, "headers over the limit");
    const auto body =
        raw_exchange("POST /mcp HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999999\r\n\r\n{}");
    EXPECT_TRUE(body.starts_with("HTTP/1.1 413")) << body.substr(0, 200);
    expect_json_body(body, "a Content-Length over the limit");
    const auto garbage = raw_exchange("GARBAGE\r\n\r\n");
    EXPECT_TRUE(garbage.starts_with("HTTP/1.1 400")) << garbage.substr(0, 200);
    expect_json_body(garbage, "not HTTP");
    expect_still_serving();
}

TEST_F(McpHttpBadInput, SessionsAreBoundedTheLeastRecentlyUsedIdleOneEnds) {
    mcp::McpHttpOptions options;
    options.max_sessions = 2;
    options.token = kToken;
    mcp::McpHttpServer bounded(io_.get_executor(), *harness_.server, options);
    const auto port = bounded.start();
    const auto initialize = [&](const std::string& body, const std::string& session) {
        net::HttpRequest request;
        request.method = "POST";
        request.target = "http://127.0.0.1:" + std::to_string(port) + "/mcp";
        request.headers.set("Content-Type", "application/json");
        request.headers.set("Authorization", std::string("Bearer ") + kToken);
        if (!session.empty()) {
            request.headers.set("Mcp-Session-Id", session);
        }
        request.body = body;
        return drive(io_, client_->send(std::move(request)));
    };
    const std::string ping = R"({"jsonrpc":"2.0","id":7,"method":"ping"})";
    std::vector<std::string> ids;
    for (int i = 0; i < 5; ++i) {
        const auto reply = initialize(kInitialize, {});
        ASSERT_EQ(reply.status, 200) << reply.body;
        ids.push_back(reply.headers.get("Mcp-Session-Id").value_or(""));
        // The first session stays in use, so the others make way for each newcomer.
        EXPECT_EQ(initialize(ping, ids.front()).status, 200) << "round " << i;
        EXPECT_LE(bounded.session_count(), 2u);
    }
    EXPECT_EQ(initialize(ping, ids[3]).status, 404) << "the least recently used session ended";
    EXPECT_EQ(initialize(ping, ids[4]).status, 200);
    drive(io_, bounded.stop());
}

}  // namespace
}  // namespace maf_sandbox::badinput
