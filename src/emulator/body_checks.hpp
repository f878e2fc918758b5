// Internal: the type and range checks of the emulator's JSON request bodies. The service binds
// bodies to typed models and refuses a field of the wrong type with 400; the emulator stores what
// it accepts and echoes it on every later GET and list, so a field it does not check (a string
// policy, an infinite interval) would poison those answers for every client. Each check throws
// Refusal 400 naming the first offending field as a path ("egressPolicy.hostRules[0].pattern").
#pragma once

#include <boost/json/object.hpp>
#include <boost/json/value.hpp>
#include <string>

namespace maf_sandbox::emulator {

// Every number anywhere in `value` is finite (JSON has no Infinity or NaN; Boost.JSON reads
// 1e999999 as infinity and would write it back as `Infinity`). `field` names `value` itself.
void check_finite(const boost::json::value& value, const std::string& field);

// An egressPolicy (reference 3.2): defaultAction Allow|Deny, trafficInspection
// Legacy|Full|Partial|None, hostRules [{pattern, action}], rules [{name?, match{...},
// action{...}}]. `field` is where it sits in the request ("egressPolicy", or "" for a whole body).
void check_egress_policy(const boost::json::value& policy, const std::string& field);

// A lifecycle policy (reference 3.3): autoSuspendPolicy {enabled, interval, mode} and
// autoDeletePolicy {enabled, deleteIntervalInSeconds} (and the aliases the SDK reads), intervals
// non-negative seconds of at most kMaxPolicySeconds.
void check_lifecycle(const boost::json::value& lifecycle, const std::string& field);
inline constexpr double kMaxPolicySeconds = 10.0 * 365 * 24 * 3600;

// A sandbox create body's fields other than labels, entrypoint and cmd (checked with their
// service-shaped answers elsewhere): sourcesRef, resources, environment, egressPolicy, lifecycle
// and the optional strings.
void check_create_body(const boost::json::object& body);

}  // namespace maf_sandbox::emulator
