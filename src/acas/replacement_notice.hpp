// The replaced-sandbox notice across processes. When the backend discards a conversation's
// sandbox a caller had used (an exec whose outcome is unknown, as the seed requires), the next
// acquire of that key by any process, on any machine, must say the state was lost. The service
// offers no label update and no small record of its own, so the notice is kept by the service in
// the only resource the backend has: before deleting the doomed sandbox, the discarding process
// creates its replacement at once, labelled `replaced-from=<doomed id>` and holding a pending
// marker file (the reason). The acquire that adopts the replacement deletes the marker: the one
// whose DELETE removed it reports Sandbox::replaced(), every later one finds it gone, so the loss
// is told once. Convergence never lets the doomed sandbox win over its replacement while both
// are listed (docs/acas.md, "No silent replacement").
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "backend_state.hpp"
#include "maf_sandbox/acas/client.hpp"
#include "maf_sandbox/core/sandbox.hpp"

namespace maf_sandbox::acas::replacement_notice {

// The label a replacement carries: the id of the sandbox it replaces (reserved: no spec may set
// it).
inline constexpr const char* kReplacedFromLabel = "replaced-from";

// The guest file whose presence means the notice for `doomed_id` is still to be told.
std::string marker_path(const std::string& doomed_id);

// True when another of `holders` names `info` as the sandbox it replaced: a doomed sandbox whose
// deletion has not been listed yet, which never holds the key against its replacement.
bool replaced_by_another(const SandboxInfo& info, const std::vector<SandboxInfo>& holders);

// Called before the doomed sandbox is deleted. When a caller had used it (the state recorded a
// replacement for its slot), creates the replacement with the doomed sandbox's own labels, image
// and egress, waits for it, sets its lifecycle and writes the marker. Never throws but for
// cancellation: a replacement that cannot be completed is deleted again, and the notice then
// lives only in this process (logged).
Task<void> leave(AcasBackend::State& state, AcasClient& client, const HeldSandbox& doomed);

// Called by an acquire that adopted `adopted` from the service: when it is a replacement whose
// marker this call removes, `handle` reports the replacement (unless it already does). Never
// throws but for cancellation: a notice that cannot be read is logged and left for the next one.
Task<void> take(AcasBackend::State& state, AcasClient& client, const SandboxInfo& adopted,
                Sandbox& handle);

}  // namespace maf_sandbox::acas::replacement_notice
