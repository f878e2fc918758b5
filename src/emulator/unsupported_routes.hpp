// Internal: the routes of the ACAS REST reference (section 4.1) the emulator does not implement.
// A client calling one gets 501 problem+json naming the operation (title RouteNotSupported), not
// the 404 of a path no service has: a 404 reads as "that sandbox or snapshot does not exist",
// and 501 is the one 5xx azure-core and the other known clients never retry.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace maf_sandbox::emulator {

inline constexpr const char* kRouteNotSupported = "RouteNotSupported";

// What the operation at `rest` (the decoded segments after the group prefix) is, when it is a
// reference route the emulator does not serve: "POST /sandboxes/{id}/snapshot (snapshots)".
// nullopt for anything else (served, or unknown to the reference).
std::optional<std::string> unsupported_route(std::string_view method,
                                             const std::vector<std::string>& rest);

}  // namespace maf_sandbox::emulator
