#include "disk_image_state.hpp"

#include "wire_table.hpp"

namespace maf_sandbox::emulator {
namespace {

constexpr WireTable<DiskImageState, kDiskImageStates.size()> kWire{{
    {DiskImageState::pending, "Pending"},
    {DiskImageState::ready, "Ready"},
    {DiskImageState::failed, "Failed"},
}};

}  // namespace

std::string_view wire_name(DiskImageState state) {
    return spelling_in(kWire, state, "Failed");
}

std::optional<DiskImageState> disk_image_state_from_wire(std::string_view name) {
    return value_in(kWire, name);
}

}  // namespace maf_sandbox::emulator
