// The host's configuration of a kind's sandbox: everything that shapes the spec and bounds a call.
// Only the host writes these; tool arguments never reach them.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "maf_sandbox/core/types.hpp"

namespace maf_sandbox::kinds {

inline constexpr std::uint64_t kDefaultMaxOutputBytes = 64 * 1024;

struct SandboxSettings {
    std::optional<std::string> image;
    // Hosts the guest may reach. Non-empty means egress allowlist, empty means closed; a kind
    // never asks for unrestricted egress.
    std::vector<std::string> egress_allow;
    // The guest base under which each call gets `{work_dir}/{12 hex}`; unset uses the sandbox's
    // own base directory.
    std::optional<std::string> work_dir;
    // `call` gives every call a fresh sandbox, disposed when the call ends.
    IsolationScope isolation_scope = IsolationScope::conversation;
    // Raises the host's isolation floor for this kind (never lowers it).
    std::optional<Isolation> min_isolation;
    // The program's deadline, and the cap on each of its output streams (over it is refused).
    Seconds timeout{60.0};
    std::uint64_t max_output_bytes = kDefaultMaxOutputBytes;
    // The bound on the per-call cleanup in the finally (a cancelled call gets at most 2 seconds).
    Seconds cleanup_timeout{30.0};
    TransferLimits files_in = kDefaultTransferLimits;
    TransferLimits files_out = kDefaultTransferLimits;
};

// The egress mode a kind asks for: allowlist when hosts are given, otherwise closed.
Egress kind_egress(const SandboxSettings& settings);

// The spec fields shared by every kind (kind name, image, egress, work dir, scope, floor, caps,
// required capabilities). Throws InvalidArgument when a timeout or the output cap is not positive.
SandboxSpecFields kind_spec_fields(std::string kind, const SandboxSettings& settings,
                                   std::set<Capability> requires_capabilities);

}  // namespace maf_sandbox::kinds
