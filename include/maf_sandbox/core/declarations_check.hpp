// The one check of a spec against what a backend declares (protocol.md 4.2, the backend half):
// the router runs it on every attach and acquire, and a backend runs it for callers that acquire
// from it directly, so a direct caller is refused exactly what a routed one is.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "maf_sandbox/core/sandbox.hpp"
#include "maf_sandbox/core/types.hpp"

namespace maf_sandbox {

// The spec's method-scoped egress rules ("GET host" and the like), in the spec's order.
std::vector<std::string> method_scoped_rules(const SandboxSpec& spec);

// Throws, in this order, the first that applies:
//   1. a required capability the backend does not declare -> SandboxCapabilityNotSupported;
//   2. a method-scoped egress rule while the backend does not declare egress_methods
//      -> SandboxCapabilityNotSupported;
//   3. the effective isolation scope (stronger(host_scope, spec scope)) outside the backend's
//      effective_isolation_scopes() -> SandboxIsolationScopeNotSupported;
//   4. a required OS family the backend does not declare -> SandboxOsFamilyNotSupported;
//   5. files_in, then files_out, above the backend's ceiling
//      -> SandboxTransferLimitsNotPermitted (refused, never clamped);
//   6. the spec's egress mode not among the backend's egress_modes -> SandboxEgressNotEnforced.
// `host_scope` is the host's isolation-scope floor (a direct caller has none: conversation).
void ensure_declared(const SandboxSpec& spec, std::string_view backend_name,
                     const BackendDeclarations& declarations,
                     IsolationScope host_scope = IsolationScope::conversation);

}  // namespace maf_sandbox
