// The harness of the MCP streamable HTTP tests: a server over loopback with the shell kind on a
// host-shell backend, and a client that sends the server's bearer token unless told otherwise.
#pragma once

#include <gtest/gtest.h>
#include <spdlog/logger.h>
#include <spdlog/sinks/ostream_sink.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/json/parse.hpp>
#include <sstream>

#include "host_shell_backend.hpp"
#include "maf_sandbox/core/run_blocking.hpp"
#include "maf_sandbox/mcp/http_guard.hpp"
#include "maf_sandbox/mcp/http_transport.hpp"
#include "maf_sandbox/net/http_client.hpp"

namespace maf_sandbox::mcp {

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

inline Task<bool> stopped(McpHttpServer& http) {
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
        McpServerConfig config;
        config.max_session_sandboxes = max_session_sandboxes_;
        server_ = std::make_unique<McpServer>(
            config, router_, nullptr,
            std::make_shared<kinds::ShellTool>(router_, kinds::ShellConfig{}, log_), log_);
        McpHttpOptions http_options;
        token_ = generate_bearer_token();
        http_options.token = token_;
        http_ = std::make_unique<McpHttpServer>(io_.get_executor(), *server_, http_options);
        port_ = http_->start();
        url_ = fmt::format("http://127.0.0.1:{}/mcp", port_);
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
        request.headers.set("Authorization", "Bearer " + token_);
        return drive(io_, client_->send(std::move(request)));
    }

    // A raw request: exactly the headers given (the client adds Host only when none is given).
    net::HttpResponse send_with(const std::vector<std::pair<std::string, std::string>>& headers,
                                std::string body) {
        net::HttpRequest request;
        request.method = "POST";
        request.target = url_;
        request.body = std::move(body);
        request.headers.set("Content-Type", "application/json");
        request.headers.set("Accept", "application/json, text/event-stream");
        for (const auto& [name, value] : headers) {
            request.headers.add(name, value);
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
    std::string token_;
    std::uint16_t port_ = 0;
    std::size_t max_session_sandboxes_ = kDefaultMaxSessionSandboxes;
};

inline constexpr const char* kInitialize =
    R"({"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}})";

}  // namespace maf_sandbox::mcp
