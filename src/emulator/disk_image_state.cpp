#include "disk_image_state.hpp"

#include <utility>

namespace maf_sandbox::emulator {
namespace {

constexpr std::array<std::pair<DiskImageState, std::string_view>, kDiskImageStates.size()> kWire{{
    {DiskImageState::pending, "Pending"},
    {DiskImageState::ready, "Ready"},
    {DiskImageState::failed, "Failed"},
}};

}  // namespace

std::string_view wire_name(DiskImageState state) {
    for (const auto& [value, name] : kWire) {
        if (value == state) {
            return name;
        }
    }
    return "Failed";  // unreachable: kWire names every enumerator
}

std::optional<DiskImageState> disk_image_state_from_wire(std::string_view name) {
    for (const auto& [value, spelled] : kWire) {
        if (spelled == name) {
            return value;
        }
    }
    return std::nullopt;
}

}  // namespace maf_sandbox::emulator
