#include "unsupported_routes.hpp"

#include <fmt/format.h>

namespace maf_sandbox::emulator {
namespace {

struct Unsupported {
    std::string_view method;   // "" = any
    std::string_view pattern;  // path after the group; "{}" matches one segment
    std::string_view what;
};

// Reference 4.1 rows 7, 17-24 and 31-35.
constexpr Unsupported kRoutes[] = {
    {"POST", "sandboxes/{}/enable", "re-enabling a disabled sandbox"},
    {"GET", "sandboxes/{}/egress-decisions", "the egress audit log"},
    {"GET", "sandboxes/{}/stats", "sandbox statistics"},
    {"POST", "sandboxes/{}/snapshot", "snapshots"},
    {"POST", "sandboxes/{}/commit", "committing a sandbox to a disk image"},
    {"POST", "sandboxes/{}/ports/add", "ports"},
    {"POST", "sandboxes/{}/ports/remove", "ports"},
    {"PUT", "sandboxes/{}/ports", "ports"},
    {"POST", "sandboxes/{}/volumes/add", "volumes"},
    {"", "snapshots", "snapshots"},
    {"", "snapshots/{}", "snapshots"},
    {"", "volumes", "volumes"},
    {"", "volumes/{}", "volumes"},
    {"", "secrets", "secrets"},
    {"", "secrets/{}", "secrets"},
    {"", "secrets/{}/keys", "secrets"},
    {"", "secrets/{}/peek", "secrets"},
};

std::vector<std::string_view> split(std::string_view pattern) {
    std::vector<std::string_view> out;
    while (!pattern.empty()) {
        const auto slash = pattern.find('/');
        out.push_back(pattern.substr(0, slash));
        if (slash == std::string_view::npos) {
            break;
        }
        pattern.remove_prefix(slash + 1);
    }
    return out;
}

bool matches(const Unsupported& route, std::string_view method,
             const std::vector<std::string>& rest) {
    if (!route.method.empty() && route.method != method) {
        return false;
    }
    const auto parts = split(route.pattern);
    if (parts.size() != rest.size()) {
        return false;
    }
    for (std::size_t i = 0; i < parts.size(); ++i) {
        if (parts[i] != "{}" && parts[i] != rest[i]) {
            return false;
        }
    }
    return true;
}

}  // namespace

std::optional<std::string> unsupported_route(std::string_view method,
                                             const std::vector<std::string>& rest) {
    for (const auto& route : kRoutes) {
        if (matches(route, method, rest)) {
            // The pattern, not the request's segments: the detail quotes no request text.
            std::string shown = "/";
            for (const auto part : split(route.pattern)) {
                shown += part == "{}" ? std::string("{id}/") : std::string(part) + "/";
            }
            shown.pop_back();
            return fmt::format("{} {} ({})", method, shown, route.what);
        }
    }
    return std::nullopt;
}

}  // namespace maf_sandbox::emulator
