// The emulator's routing as a pure function (src/emulator/routing.hpp) on hostile targets: bad
// percent-encoding, NUL, traversal segments, unknown operations and odd methods map to a refusal
// (invalid_target or not_found), never to another sandbox's endpoint, and route names never carry
// request text.
#include <gtest/gtest.h>

#include "routing.hpp"

namespace maf_sandbox::emulator {
namespace {

const std::string kGroup = "/subscriptions/s/resourceGroups/g/sandboxGroups/n";

TEST(EmulatorRoutingBadInput, MalformedTargetsAreInvalidNotRouted) {
    for (const std::string target : {"", "sandboxes", "http://evil/x", "/a%", "/a%zz", "/a b",
                                     "/\x01", "/a?b=%", "//subscriptions"}) {
        const auto route = route_request("GET", target);
        EXPECT_TRUE(route.endpoint == Endpoint::invalid_target ||
                    route.endpoint == Endpoint::not_found)
            << "'" << target << "' routed to " << route_name(route.endpoint);
    }
}

TEST(EmulatorRoutingBadInput, TraversalAndEncodedSlashesNeverReachAnotherRoute) {
    // A dot-dot segment is data, not navigation: it cannot climb out of the sandbox's path.
    EXPECT_EQ(route_request("GET", kGroup + "/sandboxes/abc/../../diskimages").endpoint,
              Endpoint::not_found);
    const auto encoded = route_request("GET", kGroup + "/sandboxes/a%2F..%2Fb");
    EXPECT_EQ(encoded.endpoint, Endpoint::sandbox_get);
    EXPECT_EQ(encoded.sandbox_id, "a/../b") << "an encoded slash stays inside the id";
    const auto nul = route_request("DELETE", kGroup + "/sandboxes/a%00b");
    EXPECT_EQ(nul.sandbox_id, std::string("a\0b", 3));
    EXPECT_EQ(route_request("GET", "/subscriptions/s/resourceGroups/g/sandboxGroups").endpoint,
              Endpoint::not_found);
    EXPECT_FALSE(route_request("GET", "/healthz/..").data_plane);
}

TEST(EmulatorRoutingBadInput, UnknownOperationsAndMethodsAreNotFoundWithAFixedName) {
    for (const auto& [method, path] : std::vector<std::pair<std::string, std::string>>{
             {"POST", "/sandboxes/abc/format-disk"},
             {"GET", "/sandboxes/abc/stop"},
             {"PATCH", "/sandboxes"},
             {"get", "/sandboxes"},
             {"GET\r\nX: y", "/sandboxes"},
             {"POST", "/sandboxes/abc/files/evil%22%0A%7Bx=%22y"},
             {"PUT", "/sandboxes/abc/files/stat"},
             {"DELETE", "/diskimages"},
         }) {
        const auto route = route_request(method, kGroup + path);
        EXPECT_EQ(route.endpoint, Endpoint::not_found) << method << " " << path;
        EXPECT_EQ(route_name(route.endpoint), "unknown");
        EXPECT_TRUE(route.data_plane) << "faults and authentication still apply";
    }
}

TEST(EmulatorRoutingBadInput, QueryValuesAreDecodedDataWhateverTheyHold) {
    const auto route =
        route_request("GET", kGroup + "/sandboxes/abc/files?path=%2Fetc%2Fpasswd%00&path=x&=&a");
    EXPECT_EQ(route.endpoint, Endpoint::files_read);
    EXPECT_EQ(route.query.at("path"), "x") << "a repeated key keeps the last value";
    EXPECT_EQ(route.query.at(""), "");
    EXPECT_EQ(route.query.at("a"), "");
}

TEST(EmulatorRoutingBadInput, TheAdminRouteIsKnownAndOutsideTheDataPlane) {
    for (const auto* method : {"GET", "PUT", "POST", "DELETE"}) {
        const auto route = route_request(method, "/admin/faults");
        EXPECT_EQ(route.endpoint, Endpoint::admin_faults) << method;
        EXPECT_FALSE(route.data_plane) << "the admin route is not itself subject to faults";
        EXPECT_EQ(route_name(route.endpoint), "admin.faults");
    }
    EXPECT_EQ(route_request("GET", "/admin/faults/x").endpoint, Endpoint::not_found);
}

TEST(EmulatorRoutingBadInput, EachGroupKeepsItsOwnPrefixAndTheSegmentsAfterIt) {
    const auto route = route_request(
        "POST", "/subscriptions/S/resourceGroups/RG/sandboxGroups/Other/sandboxes/i%2Fd/stop");
    EXPECT_EQ(route.endpoint, Endpoint::sandbox_stop);
    EXPECT_EQ(route.group, "/subscriptions/S/resourceGroups/RG/sandboxGroups/Other")
        << "case kept; the emulator folds it for its namespaces";
    EXPECT_EQ(route.rest, (std::vector<std::string>{"sandboxes", "i/d", "stop"}));
    EXPECT_EQ(route.sandbox_id, "i/d");
    EXPECT_TRUE(route_request("GET", "/healthz").rest.empty());
}

}  // namespace
}  // namespace maf_sandbox::emulator
