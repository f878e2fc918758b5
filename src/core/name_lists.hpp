// How refusals name what was asked and what is offered: lists joined, enum names sorted as text,
// transfer limits in words. Shared by the router's and the declarations' refusals.
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "maf_sandbox/core/types.hpp"

namespace maf_sandbox::detail {

inline std::string join(const std::vector<std::string>& names) {
    if (names.empty()) {
        return "(nothing)";
    }
    std::string joined;
    for (const auto& name : names) {
        joined += joined.empty() ? "" : ", ";
        joined += name;
    }
    return joined;
}

// Names are sorted as text so a message reads the same whatever the enum order is.
template <typename Enum>
std::string sorted_names(const std::set<Enum>& values) {
    std::vector<std::string> names;
    for (auto value : values) {
        names.emplace_back(to_string(value));
    }
    std::sort(names.begin(), names.end());
    return join(names);
}

inline std::string describe_limits(const TransferLimits& limits) {
    return fmt::format("{} bytes per file, {} bytes in total, {} files", limits.max_bytes_per_file,
                       limits.max_total_bytes, limits.max_files);
}

}  // namespace maf_sandbox::detail
