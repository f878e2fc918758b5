// The streamable HTTP transport at /mcp over loopback: sessions by Mcp-Session-Id, JSON responses,
// 202 for notifications, DELETE ending a session and disposing its sandboxes.
#include <gtest/gtest.h>
#include <spdlog/logger.h>
#include <spdlog/sinks/ostream_sink.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/json/parse.hpp>
#include <sstream>

#include "host_shell_backend.hpp"
#include "maf_sandbox/core/run_blocking.hpp"
#include "maf_sandbox/mcp/http_transport.hpp"
#include "maf_sandbox/net/http_client.hpp"

namespace maf_sandbox::mcp {
namespace {

namespace json = boost::json;

// Like run_blocking, but stops the loop when the task ends: the HTTP server's accept loop keeps
// the io_context busy forever.
template <typename T>
T drive(boost::asio::io_context& io, Task<T> task) {
    std::exception_ptr failure;
    std::optional<T> result;
    boost::asio::co_spawn(io, std::move(task), [&](std::exception_ptr error, T value) {
        failure = error;
        if (!error) {
            result.emplace(std::move(value));
        }
        io.stop();
    });
    io.restart();
    io.run();
    if (failure) {
        std::rethrow_exception(failure);
    }
    return std::move(*result);
}

Task<bool> stopped(McpHttpServer& http) {
    co_await http.stop();
    co_return true;
}

class McpHttpTest : public ::testing::Test {
  protected:
    void SetUp() override {
        log_ = std::make_shared<spdlog::logger>(
            "mcp-http-test", std::make_shared<spdlog::sinks::ostream_sink_mt>(log_text_));
        log_->set_level(spdlog::level::info);
        backend_ = std::make_shared<testing::HostShellBackend>();
        SandboxRouterOptions options;
        options.min_isolation = Isolation::none;
        options.log = log_;
        router_ = std::make_shared<SandboxRouter>(
            std::vector<std::shared_ptr<SandboxBackend>>{backend_}, options);
        server_ = std::make_unique<McpServer>(
            McpServerConfig{}, router_, nullptr,
            std::make_shared<kinds::ShellTool>(router_, kinds::ShellConfig{}, log_), log_);
        http_ = std::make_unique<McpHttpServer>(io_.get_executor(), *server_);
        url_ = fmt::format("http://127.0.0.1:{}/mcp", http_->start());
        client_ = std::make_unique<net::HttpClient>(io_.get_executor());
    }

    void TearDown() override { drive(io_, stopped(*http_)); }

    net::HttpResponse send(std::string method, std::string body,
                           std::optional<std::string> session = std::nullopt) {
        net::HttpRequest request;
        request.method = std::move(method);
        request.target = url_;
        request.body = std::move(body);
        request.headers.set("Content-Type", "application/json");
        request.headers.set("Accept", "application/json, text/event-stream");
        if (session) {
            request.headers.set("Mcp-Session-Id", *session);
        }
        return drive(io_, client_->send(std::move(request)));
    }

    boost::asio::io_context io_;
    std::ostringstream log_text_;
    std::shared_ptr<spdlog::logger> log_;
    std::shared_ptr<testing::HostShellBackend> backend_;
    std::shared_ptr<SandboxRouter> router_;
    std::unique_ptr<McpServer> server_;
    std::unique_ptr<McpHttpServer> http_;
    std::unique_ptr<net::HttpClient> client_;
    std::string url_;
};

constexpr const char* kInitialize =
    R"({"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}})";

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
