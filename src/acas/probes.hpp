// Acquire-time work on a sandbox: the command and capture probes, the guest removal probe (whose
// verdict withdraws capabilities), and the storage base. Successes are cached on the held sandbox;
// failures are not (the next acquire retries).
#pragma once

#include <memory>

#include "backend_state.hpp"

namespace maf_sandbox::acas::probes {

Task<void> run_acquire_probes(AcasBackend::State& state, AcasClient& client,
                              std::shared_ptr<HeldSandbox> held, const SandboxSpec& spec,
                              Deadline deadline);

// mkdir through the data plane (no guest command), then the ancestor walk from the root with the
// base itself: a link or a non-directory fails acquire; an existing base keeps its contents.
Task<void> ensure_storage_base(AcasBackend::State& state, AcasClient& client,
                               std::shared_ptr<HeldSandbox> held, Deadline deadline);

}  // namespace maf_sandbox::acas::probes
