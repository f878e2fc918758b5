// An asynchronous HTTP/1.1 server over TLS or plain TCP: keep-alive, concurrent connections, one
// coroutine handler for every request, graceful shutdown with a bounded wait.
//
// The server belongs to one executor; start() and stop() are called from it (or before it runs).
// The handler runs on that executor too: blocking work belongs on another pool.
#pragma once

#include <boost/asio/any_io_executor.hpp>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "maf_sandbox/core/sandbox.hpp"
#include "maf_sandbox/core/types.hpp"
#include "maf_sandbox/net/http.hpp"
#include "maf_sandbox/net/tls.hpp"

namespace maf_sandbox::net {

using HttpHandler = std::function<Task<HttpResponse>(HttpRequest)>;

// Thrown by a handler to make the server drop the connection in the middle of its response (the
// status line, headers and half the body are written, then the socket is closed). For fault
// injection: the client sees a request that was sent and never answered completely.
class AbortConnection : public std::exception {
  public:
    explicit AbortConnection(HttpResponse partial = {}) : partial_(std::move(partial)) {}
    const char* what() const noexcept override { return "connection aborted by the handler"; }
    const HttpResponse& partial() const noexcept { return partial_; }

  private:
    HttpResponse partial_;
};

// A server's answer to a request whose head has arrived and whose body has not been read yet.
struct BodyAdmission {
    // Answered at once, with Connection: close; the body is never read into memory.
    std::optional<HttpResponse> refusal;
    // Whatever the admission took for the request (a share of a budget), handed on in
    // HttpRequest::admission so that it lasts as long as the request's body does.
    std::shared_ptr<void> hold;
};

// `head` is the request without its body; `content_length` the length its head declares, or
// nullopt for a chunked body (whose size is known only once it has been read).
using BodyAdmitter = std::function<Task<BodyAdmission>(
    const HttpRequest& head, std::optional<std::uint64_t> content_length)>;

struct HttpServerOptions {
    std::string host = "127.0.0.1";
    std::uint16_t port = 0;  // 0 picks a free port; port() reports it after start()
    // Certificate chain and key; unset serves plain http.
    std::optional<PemCredentials> tls;
    std::size_t max_request_body_bytes = 64 * kMiB;
    // Asked about every request that has a body, before the body is read; unset admits all.
    BodyAdmitter admit_body;
    // How long a kept-alive connection may wait for its next request, and how long one request
    // may take to arrive once it started.
    Seconds idle_timeout{60.0};
    Seconds read_timeout{60.0};
};

class HttpServer {
  public:
    // Throws InvalidArgument when the TLS credentials do not load.
    HttpServer(boost::asio::any_io_executor executor, HttpServerOptions options,
               HttpHandler handler);
    ~HttpServer();
    HttpServer(const HttpServer&) = delete;
    HttpServer& operator=(const HttpServer&) = delete;

    // Binds, listens and starts accepting; returns the bound port. Throws SystemError when the
    // address cannot be bound.
    std::uint16_t start();
    std::uint16_t port() const;
    bool tls() const;

    // Stops accepting, closes idle keep-alive connections, lets in-flight requests finish and
    // answer (with Connection: close) for up to `grace`, then closes whatever is left. Idempotent.
    Task<void> stop(Seconds grace);

    // Requests whose handler is running now.
    std::size_t in_flight() const;

  private:
    struct Impl;
    std::shared_ptr<Impl> impl_;
};

}  // namespace maf_sandbox::net
