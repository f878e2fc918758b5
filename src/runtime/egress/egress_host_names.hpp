// Host names as the egress allowlist and the egress proxy compare them: one spelling per name, so
// a rule and a request can only agree when they name the same host.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace maf_sandbox::runtime {

// Lower-cases `host` and drops one trailing dot. Returns nothing when the result is not a DNS host
// name: empty, longer than 253 characters, an empty label or one over 63, a character other than
// letters, digits, '-' and '_', a label that starts or ends with '-', or a last label made only of
// digits (which resolvers read as an IPv4 number: "127.1", "2130706433").
std::optional<std::string> normalize_host_name(std::string_view host);

// True when `host` is an IP address literal in any spelling a resolver accepts: dotted IPv4
// (also the short and numeric inet_aton forms), IPv6 with or without brackets.
bool is_ip_literal(std::string_view host);

// Parses a decimal TCP port 1..65535 (digits only, at most five). Returns nothing otherwise.
std::optional<std::uint16_t> parse_port(std::string_view text);

// ASCII lower-casing (host names and header names are ASCII; locale never applies).
std::string ascii_lower(std::string_view text);
bool iequals(std::string_view a, std::string_view b);

}  // namespace maf_sandbox::runtime
