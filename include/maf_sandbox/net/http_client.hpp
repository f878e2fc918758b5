// An asynchronous HTTP/1.1 client over TLS (and plain http for tests) with a keep-alive pool per
// host, certificate verification against the system store plus an optional CA, SNI, HTTPS_PROXY
// tunnelling through CONNECT, a deadline on every request and a bound on every response.
//
// One HttpClient belongs to one executor: call send() only from coroutines running on it (one
// thread or a strand). Different clients are independent.
#pragma once

#include <boost/asio/any_io_executor.hpp>
#include <cstddef>
#include <memory>
#include <optional>
#include <string>

#include "maf_sandbox/core/sandbox.hpp"
#include "maf_sandbox/core/types.hpp"
#include "maf_sandbox/net/http.hpp"

namespace maf_sandbox::net {

// Where https requests are tunnelled. Loopback targets are never proxied.
struct ProxySettings {
    // "http://[user:password@]host:port"; empty means direct connections.
    std::string https_proxy;
    // Comma-separated: "*", host names (matching the host and its subdomains; a leading dot is
    // allowed), IP addresses.
    std::string no_proxy;

    // HTTPS_PROXY / https_proxy and NO_PROXY / no_proxy from the process environment.
    static ProxySettings from_environment();
    // True when a request to `host` must go through https_proxy.
    bool applies_to(std::string_view host) const;
};

struct HttpClientOptions {
    // Extra trust anchors (PEM) in addition to the system store: a file, or PEM text.
    std::optional<std::string> ca_file;
    std::optional<std::string> ca_pem;
    // Trust the system store too (off only in tests that prove the CA file is what is trusted).
    bool use_system_store = true;
    // nullopt: ProxySettings::from_environment() at construction.
    std::optional<ProxySettings> proxy;
    Seconds default_timeout{60.0};
    std::size_t default_max_response_bytes = 64 * kMiB;
    // Pooled idle connections per scheme://host:port, and how long one may sit idle.
    std::size_t max_idle_per_host = 8;
    Seconds idle_timeout{30.0};
    // Sent when the request carries no User-Agent of its own.
    std::string user_agent = "maf-sandbox-net/0.1";
};

struct RequestOptions {
    std::optional<Seconds> timeout;                 // whole request: connect to last body byte
    std::optional<std::size_t> max_response_bytes;  // headers + body
};

struct HttpClientStats {
    std::size_t connections_opened = 0;
    std::size_t requests = 0;
    std::size_t reused = 0;  // requests served on a pooled connection
};

class HttpClient {
  public:
    // Throws InvalidArgument when the CA file or PEM cannot be loaded.
    explicit HttpClient(boost::asio::any_io_executor executor, HttpClientOptions options = {});
    ~HttpClient();
    HttpClient(const HttpClient&) = delete;
    HttpClient& operator=(const HttpClient&) = delete;

    // Sends one request to `request.target` (absolute URL) and returns the whole response (any
    // status, 4xx and 5xx included). Sets Host, Content-Length and User-Agent when absent.
    // Throws ConnectFailed (not sent), ResponseFailed (sent), DeadlineExceeded (either phase),
    // ResponseTooLarge, or InvalidArgument for a malformed URL. A pooled connection that turns
    // out to be dead before the request was written is replaced transparently.
    Task<HttpResponse> send(HttpRequest request, RequestOptions options = {});

    // Closes every pooled idle connection (in-flight requests are unaffected).
    void close_idle();

    HttpClientStats stats() const;

  private:
    struct Impl;
    std::shared_ptr<Impl> impl_;
};

}  // namespace maf_sandbox::net
