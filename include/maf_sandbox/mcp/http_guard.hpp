// What the MCP HTTP transport admits: the checks that keep an endpoint that runs code safe to
// leave running on a developer's machine. Every parser here reads its input whole and refuses
// anything it does not recognise exactly; none of them resolves a name.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace maf_sandbox::mcp {

// The environment variable a bearer token may come from instead of being generated.
inline constexpr const char* kMcpTokenEnv = "MAF_SANDBOX_MCP_TOKEN";

// A host as it appears in a Host or Origin header, unbracketed for IPv6.
enum class HostKind { loopback, other_ip_literal, name_or_invalid };

// `host` read whole: exactly `localhost` (lower case, no trailing dot) or an IPv4 literal in
// 127.0.0.0/8 (four decimal parts, inet_pton's strict form) or `::1` is loopback; any other IPv4
// or IPv6 literal is other_ip_literal; everything else (another name, `127.0.0.1.evil.example`,
// `LOCALHOST`, `localhost.`, `0x7f.1`, userinfo) is name_or_invalid.
HostKind classify_host(std::string_view host) noexcept;

// A Host header value `host[:port]` (IPv6 bracketed). Admitted when the host is loopback, or an
// IP literal of any kind when `allow_ip_literals` (a server bound beyond loopback), and the port
// equals `port` (no port means 80). A DNS name other than `localhost` is never admitted: a name
// is what DNS rebinding points at this server.
bool host_header_allowed(std::string_view value, std::uint16_t port, bool allow_ip_literals);

// An Origin header, checked after the Host header `host_header` was admitted: absent is admitted
// (a non-browser client); present, it must name this server itself, exactly `http://` followed
// by the same host and port as the Host header (no port means 80; no userinfo, path, query or
// fragment). A page served from any other origin, another loopback port or address included
// (another local program's page, which this server never serves), is refused, and so are
// `https` (this server speaks plain HTTP), `null` and everything else.
bool origin_allowed(const std::optional<std::string>& value, std::string_view host_header);

// The address the server listens on (unbracketed): loopback per classify_host.
bool is_loopback_bind(std::string_view host) noexcept;

// 32 bytes from the kernel's random source (core's random_hex) as 64 lowercase hex digits.
// Throws SystemError when the random source fails.
std::string generate_bearer_token();

// Whether an Authorization header value is `Bearer <expected>` (scheme case-insensitive). The
// token comparison takes the same time wherever the first difference is and whatever the
// lengths: both sides are hashed (SHA-256) and the digests compared with CRYPTO_memcmp.
bool bearer_token_matches(std::string_view authorization, std::string_view expected);

}  // namespace maf_sandbox::mcp
