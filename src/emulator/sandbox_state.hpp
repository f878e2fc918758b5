// Internal: a sandbox's lifecycle state, and the one table that spells it on the wire and in the
// state file ("Creating", "Running", ...). Nothing else in the emulator writes those strings.
#pragma once

#include <array>
#include <optional>
#include <string_view>

namespace maf_sandbox::emulator {

enum class SandboxState { creating, running, stopped, suspended, deleting, failed };

// Every state, in the order the service documents them (and /metrics lists them).
inline constexpr std::array<SandboxState, 6> kSandboxStates{
    SandboxState::creating,  SandboxState::running,  SandboxState::stopped,
    SandboxState::suspended, SandboxState::deleting, SandboxState::failed};

// The service's spelling.
std::string_view wire_name(SandboxState state);
// The state a spelling names (exact match, as the service writes them); nullopt for any other.
std::optional<SandboxState> sandbox_state_from_wire(std::string_view name);

// Stopped by a client or suspended for idleness: the guest's processes are frozen.
constexpr bool is_frozen(SandboxState state) {
    return state == SandboxState::stopped || state == SandboxState::suspended;
}

}  // namespace maf_sandbox::emulator
