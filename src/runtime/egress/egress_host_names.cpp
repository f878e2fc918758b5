#include "egress_host_names.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <algorithm>

namespace maf_sandbox::runtime {
namespace {

constexpr std::size_t kMaxHostName = 253;
constexpr std::size_t kMaxLabel = 63;

constexpr char lower(char c) {
    return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c;
}

constexpr bool is_digit(char c) {
    return c >= '0' && c <= '9';
}

constexpr bool is_name_char(char c) {
    return (c >= 'a' && c <= 'z') || is_digit(c) || c == '-' || c == '_';
}

}  // namespace

std::string ascii_lower(std::string_view text) {
    std::string out(text);
    std::transform(out.begin(), out.end(), out.begin(), lower);
    return out;
}

bool iequals(std::string_view a, std::string_view b) {
    return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(),
                                              [](char x, char y) { return lower(x) == lower(y); });
}

std::optional<std::string> normalize_host_name(std::string_view host) {
    if (!host.empty() && host.back() == '.') {
        host.remove_suffix(1);
    }
    if (host.empty() || host.size() > kMaxHostName) {
        return std::nullopt;
    }
    std::string name = ascii_lower(host);
    std::size_t start = 0;
    bool last_label_numeric = false;
    while (start <= name.size()) {
        const auto end = std::min(name.find('.', start), name.size());
        const std::string_view label(name.data() + start, end - start);
        if (label.empty() || label.size() > kMaxLabel || label.front() == '-' ||
            label.back() == '-' || !std::all_of(label.begin(), label.end(), is_name_char)) {
            return std::nullopt;
        }
        last_label_numeric = std::all_of(label.begin(), label.end(), is_digit);
        start = end + 1;
    }
    if (last_label_numeric) {
        return std::nullopt;
    }
    return name;
}

bool is_ip_literal(std::string_view host) {
    if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
        host = host.substr(1, host.size() - 2);
    }
    const std::string text(host);
    in6_addr v6{};
    in_addr v4{};
    if (inet_pton(AF_INET6, text.c_str(), &v6) == 1 || inet_aton(text.c_str(), &v4) != 0) {
        return true;
    }
    // A name whose last label is all digits (or hex, "0x7f") is something a resolver may read as
    // a number; normalize_host_name refuses those, so anything it refuses with a dot or colon in
    // it and no letters beyond hex digits counts as a literal here too.
    if (!host.empty() && host.back() == '.') {
        host.remove_suffix(1);
    }
    const auto last_dot = host.rfind('.');
    const auto last = last_dot == std::string_view::npos ? host : host.substr(last_dot + 1);
    return !last.empty() && (std::all_of(last.begin(), last.end(), is_digit) ||
                             (last.size() > 2 && last[0] == '0' && lower(last[1]) == 'x'));
}

std::optional<std::uint16_t> parse_port(std::string_view text) {
    if (text.empty() || text.size() > 5 || !std::all_of(text.begin(), text.end(), is_digit)) {
        return std::nullopt;
    }
    unsigned value = 0;
    for (const char c : text) {
        value = value * 10 + static_cast<unsigned>(c - '0');
    }
    if (value == 0 || value > 65535) {
        return std::nullopt;
    }
    return static_cast<std::uint16_t>(value);
}

}  // namespace maf_sandbox::runtime
