// Internal: which request fields the emulator implements. The rule (docs/emulator.md, "Fields and
// routes"): a field the emulator accepts is stored and echoed as the service would; a field whose
// behaviour it does not implement, or one the REST reference does not know, is refused with 400
// problem+json (title FieldNotSupported) naming the field. Nothing is accepted and dropped: a
// client written against the service would otherwise believe it got volumes, ports or an
// entrypoint it never got. Types and ranges of the accepted fields are body_checks.hpp's job.
#pragma once

#include <boost/json/object.hpp>
#include <initializer_list>
#include <string>
#include <string_view>

namespace maf_sandbox::emulator {

inline constexpr const char* kFieldNotSupported = "FieldNotSupported";

// The sandbox create body (reference 4.2): sourcesRef{diskImage{id,name,isPublic}}, resources
// {cpu,memory}, lifecycle, labels, environment and egressPolicy are implemented. vmmType is
// accepted only as "maf-emulator", skipEgressProxy only as false, and ports, volumes,
// connections, entrypoint and cmd only when empty (asking for nothing); every other field
// (presetSandboxType, customerVnetConnectionName, resources.disk, ...) is refused by name.
void refuse_unsupported_create_fields(const boost::json::object& body);

// A lifecycle policy's keys: autoSuspendPolicy{enabled,interval,mode} and
// autoDeletePolicy{enabled,deleteIntervalInSeconds,trigger}. The spellings only the SDK's reader
// tolerates (autoSuspend, idleTimeoutInSeconds, ...) and the TS port's deleteIntervalSeconds are
// refused naming the service's spelling. `field` is where the policy sits ("lifecycle" or "").
void refuse_unsupported_lifecycle_fields(const boost::json::object& lifecycle,
                                         const std::string& field);

// An egress policy's keys: defaultAction, trafficInspection, hostRules[{pattern, action}] and
// rules (whose entries body_checks.hpp shapes). `field` is where it sits ("egressPolicy" or "").
void refuse_unsupported_egress_fields(const boost::json::object& policy, const std::string& field);

// The disk-image create body (reference 4.1 row 27): image{base}, labels, name,
// managedIdentityResourceId and registryCredentials{username,token}; a non-empty
// image.entrypoint or image.cmd is refused (the emulator never runs an image's entrypoint).
void refuse_unsupported_disk_image_fields(const boost::json::object& body);

// Any other body: refuses a key outside `known`, naming `where` (the route) in the detail.
void refuse_unknown_fields(const boost::json::object& body,
                           std::initializer_list<std::string_view> known, std::string_view where);

}  // namespace maf_sandbox::emulator
