// The small, strict slice of HTTP/1.1 the egress proxy speaks: request heads from the guest
// (absolute-form for forwarding, authority-form for CONNECT), the head it forwards upstream, and
// the head of the upstream's response. Anything ambiguous is refused, never guessed at, because
// a proxy and a server that read one request two ways is how requests get smuggled.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace maf_sandbox::runtime {

// Request and response heads larger than this are refused.
inline constexpr std::size_t kMaxRequestHead = 16 * 1024;
inline constexpr std::size_t kMaxResponseHead = 64 * 1024;

// Thrown by the parsers; `reason` is one of our fixed phrases (safe for a header and the log).
struct EgressRefusal {
    std::string_view reason;
};

struct HttpField {
    std::string name;   // as sent
    std::string value;  // without surrounding whitespace
};

struct RequestHead {
    std::string method;
    std::string target;
    int minor_version = 1;  // HTTP/1.<minor>
    std::vector<HttpField> fields;
};

// `head` runs up to and including the blank line. Throws EgressRefusal.
RequestHead parse_request_head(std::string_view head);

// A host and port as a request names them. `ip_literal` when the host is an address.
struct Authority {
    std::string host;  // normalized (lower-case, no trailing dot) unless ip_literal
    std::uint16_t port = 0;
    bool ip_literal = false;
};

// "host[:port]" (a Host header, an absolute URI's authority) or "host:port" (CONNECT, where
// `default_port` is nothing and the port is required). Refuses userinfo, empty or bad ports and
// names that are not host names. Throws EgressRefusal.
Authority parse_authority(std::string_view text, std::optional<std::uint16_t> default_port);

// An absolute-form target "http://authority[/path][?query]". `path` is the origin-form to send
// upstream ("/" when the URI has none). Throws EgressRefusal for any other scheme or a fragment.
struct AbsoluteTarget {
    Authority authority;
    std::string path;
};
AbsoluteTarget parse_absolute_target(std::string_view target);

// How the request's body is framed.
struct BodyFraming {
    bool chunked = false;
    std::uint64_t content_length = 0;  // when not chunked
};
BodyFraming body_framing(const RequestHead& head);

// The head to send upstream: origin-form request line, HTTP/1.1, the guest's fields minus
// hop-by-hop and proxy fields (and any named in Connection), `Host` set to `host_field`, and
// "Connection: close".
std::string upstream_request_head(const RequestHead& head, const std::string& path,
                                  std::string_view host_field, const BodyFraming& framing);

// Rewrites an upstream response head (status line up to the blank line) for the guest:
// hop-by-hop fields removed, "Connection: close" added. Throws EgressRefusal when it is not an
// HTTP/1.x response head.
std::string guest_response_head(std::string_view head);

// "HTTP/1.1 403 Forbidden" with `x-deny-reason: <reason>`, a short body and Connection: close.
std::string forbidden_response(std::string_view reason);
// A non-denial failure (502 Bad Gateway, 504 Gateway Timeout) with a short body.
std::string gateway_failure_response(int status, std::string_view phrase, std::string_view why);

}  // namespace maf_sandbox::runtime
