// The MCP streamable HTTP transport at `/mcp` over the net layer's HttpServer: POST carries one
// JSON-RPC message. A request is answered with application/json, except a tools/call that carries
// a progress token from a client that accepts text/event-stream: that one is answered as
// server-sent events (its progress notifications as they happen, then its response, then the end
// of the body). The Mcp-Session-Id header names the session created by initialize, DELETE ends a
// session and disposes its sandboxes, GET is not offered (405).
//
// Every request to /mcp is checked, in this order (http_guard.hpp): the Host header (403 unless a
// loopback host, or with allow_remote an IP literal, with the server's port), the Origin header
// (403 when present and not this server's own: `http://` and the Host header's host and port),
// then the bearer token (401 with `WWW-Authenticate: Bearer` when missing or wrong). A header
// that repeats is refused (403, or 401 for Authorization).
#pragma once

#include <boost/asio/any_io_executor.hpp>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "maf_sandbox/core/sandbox.hpp"
#include "maf_sandbox/mcp/server.hpp"

namespace maf_sandbox::mcp {

inline constexpr const char* kMcpPath = "/mcp";

struct McpHttpOptions {
    // Loopback by default: the endpoint runs code, so exposing it is the operator's explicit act.
    std::string host = "127.0.0.1";
    std::uint16_t port = 0;  // 0 picks a free port
    // The bearer token every request must carry. Required: an empty token is refused at
    // construction, so no configuration serves /mcp unauthenticated.
    std::string token;
    // A host that is not loopback (a LAN address, 0.0.0.0) is refused at construction unless this
    // is set; then a Host header may name any IP literal (never a DNS name other than localhost).
    bool allow_remote = false;
    // Sessions open at once. An initialize beyond it ends the least recently used idle session
    // (disposing its sandboxes; its client gets 404 and initializes again), or is refused with 503
    // when every session has a request in flight.
    std::size_t max_sessions = 64;
};

class McpHttpServer {
  public:
    // Throws InvalidArgument when options.token is empty, or when options.host is not loopback
    // and options.allow_remote is not set (nothing is bound then).
    McpHttpServer(boost::asio::any_io_executor executor, McpServer& server, McpHttpOptions options);
    ~McpHttpServer();
    McpHttpServer(const McpHttpServer&) = delete;
    McpHttpServer& operator=(const McpHttpServer&) = delete;

    // Binds and listens; returns the port. Throws SystemError when the address cannot be bound.
    std::uint16_t start();
    std::uint16_t port() const;

    // Ends every session (disposing its sandboxes), then stops the HTTP server. Idempotent.
    Task<void> stop();

    std::size_t session_count() const;

  private:
    struct Impl;
    std::shared_ptr<Impl> impl_;
};

}  // namespace maf_sandbox::mcp
