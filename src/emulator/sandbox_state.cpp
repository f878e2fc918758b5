#include "sandbox_state.hpp"

#include <utility>

namespace maf_sandbox::emulator {
namespace {

constexpr std::array<std::pair<SandboxState, std::string_view>, kSandboxStates.size()> kWire{{
    {SandboxState::creating, "Creating"},
    {SandboxState::running, "Running"},
    {SandboxState::stopped, "Stopped"},
    {SandboxState::suspended, "Suspended"},
    {SandboxState::deleting, "Deleting"},
    {SandboxState::failed, "Failed"},
}};

}  // namespace

std::string_view wire_name(SandboxState state) {
    for (const auto& [value, name] : kWire) {
        if (value == state) {
            return name;
        }
    }
    return "Failed";  // unreachable: kWire names every enumerator
}

std::optional<SandboxState> sandbox_state_from_wire(std::string_view name) {
    for (const auto& [value, spelled] : kWire) {
        if (spelled == name) {
            return value;
        }
    }
    return std::nullopt;
}

}  // namespace maf_sandbox::emulator
