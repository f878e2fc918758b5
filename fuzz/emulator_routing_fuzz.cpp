// The emulator's request routing (src/emulator/routing.hpp) on an arbitrary method and target.
//
// Properties, beyond not crashing and never throwing:
// - a route's name (what logs and /metrics carry) is one of the fixed names, never request text,
//   so no client can grow the metrics label set or inject lines into it;
// - an endpoint that acts on a sandbox carries the decoded id segment, and only data-plane routes
//   carry a group;
// - routing depends only on the decoded target: the same segments and query re-encoded route to
//   the same endpoint, group, id and query.
#include <fuzzer/FuzzedDataProvider.h>

#include <boost/url/parse.hpp>
#include <cctype>
#include <cstdint>
#include <string>

#include "fuzz_check.hpp"
#include "routing.hpp"

namespace maf_sandbox::emulator {
namespace {

using fuzz::require;

constexpr const char* kMethods[] = {"GET", "PUT", "POST", "DELETE", "PATCH", "HEAD"};

// Percent-encodes every byte but the unreserved ones: valid in any path segment or query part.
std::string encode(std::string_view text) {
    static constexpr char kHex[] = "0123456789ABCDEF";
    std::string out;
    for (const char c : text) {
        const auto u = static_cast<unsigned char>(c);
        if (std::isalnum(u) || c == '-' || c == '.' || c == '_' || c == '~') {
            out += c;
        } else {
            out += '%';
            out += kHex[u >> 4];
            out += kHex[u & 15];
        }
    }
    return out;
}

bool fixed_name(std::string_view name) {
    for (const char c : name) {
        const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '.' || c == '-';
        if (!ok) {
            return false;
        }
    }
    return !name.empty() && name.size() < 40;
}

void check(const std::string& method, const std::string& target) {
    const auto route = route_request(method, target);
    const auto name = route_name(route.endpoint);
    require(fixed_name(name), "a route name is one of the fixed names", name);
    require(route.data_plane || route.group.empty(), "only data-plane routes carry a group",
            target);
    if (route.endpoint == Endpoint::invalid_target) {
        return;
    }
    const auto parsed = boost::urls::parse_origin_form(target);
    require(parsed.has_value(), "a routed target parses", target);
    std::string again_target;
    for (const auto& segment : parsed->segments()) {
        if (segment == "." || segment == "..") {
            // Boost.URL presents dot segments differently once re-encoded (a leading "/." is its
            // own disambiguation marker), so the round trip is only meaningful without them.
            return;
        }
        again_target += "/" + encode(segment);
    }
    if (again_target.empty()) {
        again_target = "/";
    }
    char separator = '?';
    for (const auto& param : parsed->params()) {
        again_target += separator + encode(param.key) + "=" + encode(param.value);
        separator = '&';
    }
    const auto again = route_request(method, again_target);
    require(again.endpoint == route.endpoint && again.group == route.group &&
                again.sandbox_id == route.sandbox_id && again.image == route.image &&
                again.query == route.query && again.data_plane == route.data_plane,
            "a re-encoded target routes the same way", target + " vs " + again_target);
}

}  // namespace
}  // namespace maf_sandbox::emulator

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    FuzzedDataProvider input(data, size);
    const auto choice = input.ConsumeIntegralInRange<int>(0, 6);
    const std::string method =
        choice < 6 ? maf_sandbox::emulator::kMethods[choice] : input.ConsumeRandomLengthString(8);
    maf_sandbox::emulator::check(method, input.ConsumeRemainingBytesAsString());
    return 0;
}
