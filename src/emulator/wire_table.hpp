// Internal: the lookups of a state enum's one wire table (sandbox_state.cpp,
// disk_image_state.cpp): a table of {value, spelling} rows, one per enumerator.
#pragma once

#include <array>
#include <cstddef>
#include <optional>
#include <string_view>
#include <utility>

namespace maf_sandbox::emulator {

template <typename Enum, std::size_t N>
using WireTable = std::array<std::pair<Enum, std::string_view>, N>;

// The spelling of `state`; `fallback` only for a value the table lacks (none: a table names
// every enumerator).
template <typename Enum, std::size_t N>
constexpr std::string_view spelling_in(const WireTable<Enum, N>& table, Enum state,
                                       std::string_view fallback) {
    for (const auto& [value, name] : table) {
        if (value == state) {
            return name;
        }
    }
    return fallback;
}

// The value an exact spelling names; nullopt for any other.
template <typename Enum, std::size_t N>
constexpr std::optional<Enum> value_in(const WireTable<Enum, N>& table, std::string_view name) {
    for (const auto& [value, spelled] : table) {
        if (spelled == name) {
            return value;
        }
    }
    return std::nullopt;
}

}  // namespace maf_sandbox::emulator
