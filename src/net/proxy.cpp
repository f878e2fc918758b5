#include <boost/asio/ip/address.hpp>
#include <cstdlib>

#include "maf_sandbox/net/http_client.hpp"

namespace maf_sandbox::net {
namespace {

std::string env_either(const char* upper, const char* lower) {
    if (const char* v = std::getenv(upper); v != nullptr && *v != '\0') {
        return v;
    }
    if (const char* v = std::getenv(lower); v != nullptr && *v != '\0') {
        return v;
    }
    return {};
}

std::string lowered(std::string_view text) {
    std::string out;
    for (char c : text) {
        out.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
    }
    return out;
}

std::string_view trimmed(std::string_view text) {
    while (!text.empty() && (text.front() == ' ' || text.front() == '\t')) {
        text.remove_prefix(1);
    }
    while (!text.empty() && (text.back() == ' ' || text.back() == '\t')) {
        text.remove_suffix(1);
    }
    return text;
}

// One NO_PROXY entry against a host: "*", an exact host or IP, or a domain suffix.
bool entry_matches(std::string_view entry, const std::string& host) {
    if (entry == "*") {
        return true;
    }
    // Entries may carry a port ("example.com:8443"); the port is ignored, as curl does for hosts.
    if (auto colon = entry.rfind(':');
        colon != std::string_view::npos && entry.find(':') == colon) {
        entry = entry.substr(0, colon);
    }
    if (!entry.empty() && entry.front() == '.') {
        entry.remove_prefix(1);
    }
    const std::string e = lowered(entry);
    if (e.empty()) {
        return false;
    }
    if (host == e) {
        return true;
    }
    return host.size() > e.size() && host.ends_with(e) && host[host.size() - e.size() - 1] == '.';
}

}  // namespace

ProxySettings ProxySettings::from_environment() {
    return ProxySettings{env_either("HTTPS_PROXY", "https_proxy"),
                         env_either("NO_PROXY", "no_proxy")};
}

bool ProxySettings::applies_to(std::string_view host) const {
    if (https_proxy.empty() || is_loopback_host(host)) {
        return false;
    }
    const std::string h = lowered(host);
    std::string_view rest = no_proxy;
    while (!rest.empty()) {
        const auto comma = rest.find(',');
        const auto entry = trimmed(rest.substr(0, comma));
        if (entry_matches(entry, h)) {
            return false;
        }
        if (comma == std::string_view::npos) {
            break;
        }
        rest.remove_prefix(comma + 1);
    }
    return true;
}

}  // namespace maf_sandbox::net
