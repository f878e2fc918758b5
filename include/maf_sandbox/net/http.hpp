// Plain HTTP/1.1 messages and the transport errors shared by HttpClient and HttpServer. No Beast
// here: the wire types live only in src/net.
#pragma once

#include <boost/asio/awaitable.hpp>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "maf_sandbox/core/errors.hpp"

namespace maf_sandbox::net {

// Header fields in arrival order. Names compare case-insensitively; a name may repeat.
class HttpHeaders {
  public:
    using Field = std::pair<std::string, std::string>;

    // Appends a field (keeps earlier ones with the same name).
    void add(std::string name, std::string value);
    // Replaces every field of that name with one field.
    void set(std::string name, std::string value);
    void remove(std::string_view name);
    // The first field of that name.
    std::optional<std::string> get(std::string_view name) const;
    bool contains(std::string_view name) const { return get(name).has_value(); }

    const std::vector<Field>& fields() const noexcept { return fields_; }
    auto begin() const noexcept { return fields_.begin(); }
    auto end() const noexcept { return fields_.end(); }

  private:
    std::vector<Field> fields_;
};

// For HttpClient, `target` is an absolute http:// or https:// URL; a server handler receives the
// origin form (`/path?query`) exactly as the client sent it.
struct HttpRequest {
    std::string method = "GET";
    std::string target;
    HttpHeaders headers;
    std::string body;
    // Server side only: what the server's body admission (HttpServerOptions::admit_body) took for
    // this request before its body was read, kept for as long as the request is.
    std::shared_ptr<void> admission = nullptr;
};

// A response body produced piece by piece, for a body too large to hold in memory at once: the
// server sends size() as Content-Length, then each piece next() returns until an empty one. A
// piece stays valid until the following call. A stream that ends short of size() or throws drops
// the connection (the client sees a truncated response, never a wrong one).
class BodyStream {
  public:
    virtual ~BodyStream() = default;
    virtual std::uint64_t size() const = 0;
    virtual boost::asio::awaitable<std::string_view> next() = 0;
};

struct HttpResponse {
    int status = 200;
    HttpHeaders headers;
    std::string body;
    // Set by a server handler instead of `body` (which is then ignored). The HTTP client never
    // sets it.
    std::shared_ptr<BodyStream> body_stream;
};

// Case-insensitive ASCII comparison for header names and methods.
bool iequals(std::string_view a, std::string_view b) noexcept;

// --- Transport errors ---------------------------------------------------------------------------

// Whether the server may have received the whole request. `not_sent` is a promise: the request
// was not completely written, so the server cannot have acted on it and it is safe to re-send.
// `sent` means the outcome is unknown; a non-idempotent request must not be re-sent blindly.
enum class RequestPhase { not_sent, sent };

class NetError : public Error {
  public:
    NetError(const std::string& message, RequestPhase phase) : Error(message), phase_(phase) {}
    std::string_view type_name() const noexcept override { return "NetError"; }
    RequestPhase phase() const noexcept { return phase_; }
    bool request_sent() const noexcept { return phase_ == RequestPhase::sent; }

  private:
    RequestPhase phase_;
};

// Name resolution, TCP connect, the proxy tunnel, the TLS handshake (certificate verification
// included) or the request write failed: always RequestPhase::not_sent.
class ConnectFailed : public NetError {
  public:
    explicit ConnectFailed(const std::string& message)
        : NetError(message, RequestPhase::not_sent) {}
    std::string_view type_name() const noexcept override { return "ConnectFailed"; }
};

// The server's certificate was not accepted: its chain does not reach a trusted CA, it has
// expired, or it names another host. Retrying cannot change that, so callers do not retry it;
// problem() is OpenSSL's own account of the verification failure.
class TlsVerificationFailed : public ConnectFailed {
  public:
    TlsVerificationFailed(const std::string& message, std::string problem)
        : ConnectFailed(message), problem_(std::move(problem)) {}
    std::string_view type_name() const noexcept override { return "TlsVerificationFailed"; }
    const std::string& problem() const noexcept { return problem_; }

  private:
    std::string problem_;
};

// The request went out and the connection failed before a complete response arrived (reset, EOF,
// malformed response): always RequestPhase::sent.
class ResponseFailed : public NetError {
  public:
    explicit ResponseFailed(const std::string& message) : NetError(message, RequestPhase::sent) {}
    std::string_view type_name() const noexcept override { return "ResponseFailed"; }
};

// The request's deadline expired; phase() says whether the request had been sent by then.
class DeadlineExceeded : public NetError {
  public:
    using NetError::NetError;
    std::string_view type_name() const noexcept override { return "DeadlineExceeded"; }
};

// The response (headers or body) was larger than the request's bound; the connection is dropped.
class ResponseTooLarge : public NetError {
  public:
    explicit ResponseTooLarge(const std::string& message) : NetError(message, RequestPhase::sent) {}
    std::string_view type_name() const noexcept override { return "ResponseTooLarge"; }
};

// --- URLs ---------------------------------------------------------------------------------------

struct ParsedUrl {
    std::string scheme;  // "http" or "https", lower case
    std::string host;    // without IPv6 brackets
    std::uint16_t port = 0;
    std::string target;  // origin form: encoded path (at least "/") plus "?query" when present

    bool is_https() const noexcept { return scheme == "https"; }
    // host:port as a Host header and CONNECT authority write it (IPv6 bracketed).
    std::string authority() const;
};

// Parses an absolute http(s) URL. Throws InvalidArgument for anything else (no scheme, another
// scheme, userinfo, an empty host).
ParsedUrl parse_http_url(std::string_view url);

// RFC 3986 percent-encoding: the unreserved characters (A-Z a-z 0-9 - _ . ~) stay, and so does
// '/' when `keep_slash` (a path inside a query value); every other byte becomes %XX.
std::string percent_encode(std::string_view text, bool keep_slash = false);

// True for "localhost", 127.0.0.0/8 and ::1.
bool is_loopback_host(std::string_view host) noexcept;

}  // namespace maf_sandbox::net
