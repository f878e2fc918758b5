// Internal: a disk image's import state, and the one table that spells it on the wire and in the
// state file ("Pending", "Ready", "Failed"). Nothing else in the emulator writes those strings.
#pragma once

#include <array>
#include <optional>
#include <string_view>

namespace maf_sandbox::emulator {

enum class DiskImageState { pending, ready, failed };

// Every state, in the order an import passes through them.
inline constexpr std::array<DiskImageState, 3> kDiskImageStates{
    DiskImageState::pending, DiskImageState::ready, DiskImageState::failed};

// The service's spelling.
std::string_view wire_name(DiskImageState state);
// The state a spelling names (exact match, as the service writes them); nullopt for any other.
std::optional<DiskImageState> disk_image_state_from_wire(std::string_view name);

}  // namespace maf_sandbox::emulator
