// The disk image state's one wire table: every state has one spelling that reads back as itself,
// and no other spelling names a state.
#include <gtest/gtest.h>

#include <set>
#include <string_view>

#include "disk_image_state.hpp"

namespace maf_sandbox::emulator {
namespace {

TEST(DiskImageStateWire, EveryStateHasOneSpellingThatReadsBackAsItself) {
    std::set<std::string_view> names;
    for (const auto state : kDiskImageStates) {
        const auto name = wire_name(state);
        EXPECT_TRUE(names.insert(name).second) << name << " spells two states";
        EXPECT_EQ(disk_image_state_from_wire(name), state) << name;
    }
    EXPECT_EQ(names, (std::set<std::string_view>{"Pending", "Ready", "Failed"}));
}

TEST(DiskImageStateWire, OtherSpellingsNameNoState) {
    for (const char* other : {"", "ready", "READY", "Ready ", "Running", "Importing"}) {
        EXPECT_EQ(disk_image_state_from_wire(other), std::nullopt) << other;
    }
}

}  // namespace
}  // namespace maf_sandbox::emulator
