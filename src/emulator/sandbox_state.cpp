#include "sandbox_state.hpp"

#include "wire_table.hpp"

namespace maf_sandbox::emulator {
namespace {

constexpr WireTable<SandboxState, kSandboxStates.size()> kWire{{
    {SandboxState::creating, "Creating"},
    {SandboxState::running, "Running"},
    {SandboxState::stopped, "Stopped"},
    {SandboxState::suspended, "Suspended"},
    {SandboxState::deleting, "Deleting"},
    {SandboxState::failed, "Failed"},
}};

}  // namespace

std::string_view wire_name(SandboxState state) {
    return spelling_in(kWire, state, "Failed");
}

std::optional<SandboxState> sandbox_state_from_wire(std::string_view name) {
    return value_in(kWire, name);
}

}  // namespace maf_sandbox::emulator
