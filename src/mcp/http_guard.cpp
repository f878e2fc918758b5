#include "maf_sandbox/mcp/http_guard.hpp"

#include <arpa/inet.h>
#include <openssl/crypto.h>
#include <openssl/sha.h>

#include <array>
#include <cerrno>

#include "maf_sandbox/core/errors.hpp"
#include "maf_sandbox/core/random_id.hpp"

namespace maf_sandbox::mcp {
namespace {

constexpr std::string_view kLocalhost = "localhost";
constexpr std::uint16_t kDefaultHttpPort = 80;
constexpr std::size_t kTokenBytes = 32;

// A decimal port of 1 to 5 digits, 0-65535.
std::optional<std::uint16_t> parse_port(std::string_view text) {
    if (text.empty() || text.size() > 5) {
        return std::nullopt;
    }
    unsigned value = 0;
    for (const char c : text) {
        if (c < '0' || c > '9') {
            return std::nullopt;
        }
        value = value * 10 + static_cast<unsigned>(c - '0');
    }
    if (value > 65535) {
        return std::nullopt;
    }
    return static_cast<std::uint16_t>(value);
}

struct Authority {
    std::string host;  // unbracketed
    std::optional<std::uint16_t> port;
};

// `host[:port]` or `[v6][:port]`, whole; nullopt for anything else (an empty host, a second
// colon outside brackets, a bad port, characters after the port).
std::optional<Authority> parse_authority(std::string_view text) {
    Authority parsed;
    std::string_view rest;
    if (!text.empty() && text.front() == '[') {
        const auto close = text.find(']');
        if (close == std::string_view::npos) {
            return std::nullopt;
        }
        parsed.host = std::string(text.substr(1, close - 1));
        // Only an IPv6 literal may be bracketed.
        in6_addr address{};
        if (::inet_pton(AF_INET6, parsed.host.c_str(), &address) != 1) {
            return std::nullopt;
        }
        rest = text.substr(close + 1);
    } else {
        const auto colon = text.find(':');
        parsed.host = std::string(text.substr(0, colon));
        rest = colon == std::string_view::npos ? std::string_view{} : text.substr(colon);
    }
    if (parsed.host.empty()) {
        return std::nullopt;
    }
    if (!rest.empty()) {
        if (rest.front() != ':') {
            return std::nullopt;
        }
        parsed.port = parse_port(rest.substr(1));
        if (!parsed.port) {
            return std::nullopt;
        }
    }
    return parsed;
}

}  // namespace

HostKind classify_host(std::string_view host) noexcept {
    if (host == kLocalhost) {
        return HostKind::loopback;
    }
    if (host.empty() || host.size() > INET6_ADDRSTRLEN) {
        return HostKind::name_or_invalid;
    }
    const std::string text(host);
    in_addr v4{};
    if (::inet_pton(AF_INET, text.c_str(), &v4) == 1) {
        const auto first_octet = static_cast<unsigned char>(ntohl(v4.s_addr) >> 24);
        return first_octet == 127 ? HostKind::loopback : HostKind::other_ip_literal;
    }
    in6_addr v6{};
    if (::inet_pton(AF_INET6, text.c_str(), &v6) == 1) {
        return IN6_IS_ADDR_LOOPBACK(&v6) ? HostKind::loopback : HostKind::other_ip_literal;
    }
    return HostKind::name_or_invalid;
}

bool host_header_allowed(std::string_view value, std::uint16_t port, bool allow_ip_literals) {
    const auto authority = parse_authority(value);
    if (!authority || authority->port.value_or(kDefaultHttpPort) != port) {
        return false;
    }
    const auto kind = classify_host(authority->host);
    return kind == HostKind::loopback || (allow_ip_literals && kind == HostKind::other_ip_literal);
}

bool origin_allowed(const std::optional<std::string>& value, std::string_view host_header) {
    if (!value) {
        return true;
    }
    constexpr std::string_view kScheme = "http://";
    const std::string_view text = *value;
    if (text.substr(0, kScheme.size()) != kScheme) {
        return false;
    }
    const auto origin = parse_authority(text.substr(kScheme.size()));
    const auto host = parse_authority(host_header);
    // Same host text (classify_host already admitted only exact loopback or IP-literal forms for
    // the Host header) and the same port, defaults applied: the page is this server's own.
    return origin && host && origin->host == host->host &&
           origin->port.value_or(kDefaultHttpPort) == host->port.value_or(kDefaultHttpPort);
}

bool is_loopback_bind(std::string_view host) noexcept {
    return classify_host(host) == HostKind::loopback;
}

std::string generate_bearer_token() {
    try {
        return random_hex(kTokenBytes);
    } catch (const SystemError& e) {
        throw SystemError(e.error_number(), "generating the MCP bearer token",
                          "set MAF_SANDBOX_MCP_TOKEN to a token of your own");
    }
}

bool bearer_token_matches(std::string_view authorization, std::string_view expected) {
    constexpr std::string_view kScheme = "bearer ";
    if (expected.empty() || authorization.size() <= kScheme.size()) {
        return false;
    }
    for (std::size_t i = 0; i < kScheme.size(); ++i) {
        const char c = authorization[i];
        const char lower = (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c;
        if (lower != kScheme[i]) {
            return false;
        }
    }
    const auto presented = authorization.substr(kScheme.size());
    // Digests of equal length, so neither the position of a difference nor a length difference
    // shows in the time taken.
    std::array<unsigned char, SHA256_DIGEST_LENGTH> got{};
    std::array<unsigned char, SHA256_DIGEST_LENGTH> want{};
    SHA256(reinterpret_cast<const unsigned char*>(presented.data()), presented.size(), got.data());
    SHA256(reinterpret_cast<const unsigned char*>(expected.data()), expected.size(), want.data());
    return CRYPTO_memcmp(got.data(), want.data(), got.size()) == 0;
}

}  // namespace maf_sandbox::mcp
