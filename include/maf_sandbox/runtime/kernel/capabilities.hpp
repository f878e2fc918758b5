// Dropping capabilities (capabilities.cpp): PID 1 empties its bounding set once, and every
// process that runs something of the guest's or a service's drops the rest. Both may run between
// fork and exec.
#pragma once

namespace maf_sandbox::runtime {

// Async-signal-safe. Empties the bounding set (needs CAP_SETPCAP: call before changing uid).
bool drop_bounding_set() noexcept;
// Async-signal-safe. Clears ambient, effective, permitted and inheritable sets and sets
// no_new_privs, so nothing the guest executes can regain a capability.
bool drop_all_capabilities() noexcept;

}  // namespace maf_sandbox::runtime
