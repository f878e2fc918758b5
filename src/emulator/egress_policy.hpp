// Internal: the service's egressPolicy (reference section 3.2) as the local runtime's egress
// modes, or a refusal when the runtime cannot enforce it faithfully (docs/emulator.md).
#pragma once

#include <boost/json/object.hpp>
#include <stdexcept>
#include <string>

#include "maf_sandbox/runtime/egress/egress.hpp"

namespace maf_sandbox::emulator {

// A policy the emulator cannot enforce; the create answers 400 with this message.
class UnsupportedEgressPolicy : public std::runtime_error {
  public:
    using std::runtime_error::runtime_error;
};

// defaultAction Allow (or no policy): unrestricted. Deny without Allow host rules: closed. Deny
// with Allow host rules: an allowlist of their patterns (`*.example.com` and `host:port` as the
// runtime reads them). L7 `rules[]` are not enforced (a host they name stays denied). Throws
// UnsupportedEgressPolicy for Deny host rules under Allow, an unknown action, or a pattern the
// runtime refuses.
runtime::EgressPolicy egress_for(const boost::json::object& policy);

}  // namespace maf_sandbox::emulator
