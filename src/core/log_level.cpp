#include "maf_sandbox/core/log_level.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cstdlib>
#include <string>
#include <utility>

#include "maf_sandbox/core/errors.hpp"

namespace maf_sandbox {

spdlog::level::level_enum parse_log_level(std::string_view name) {
    std::string lowered(name.substr(0, 40));
    std::transform(lowered.begin(), lowered.end(), lowered.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    static constexpr std::array<std::pair<std::string_view, spdlog::level::level_enum>, 7> kLevels{{
        {"trace", spdlog::level::trace},
        {"debug", spdlog::level::debug},
        {"info", spdlog::level::info},
        {"warn", spdlog::level::warn},
        {"warning", spdlog::level::warn},
        {"error", spdlog::level::err},
        {"off", spdlog::level::off},
    }};
    for (const auto& [known, level] : kLevels) {
        if (lowered == known && name.size() <= 40) {
            return level;
        }
    }
    throw InvalidArgument(fmt::format("'{}{}' is not a log level; use {}", name.substr(0, 40),
                                      name.size() > 40 ? "..." : "", kLogLevelNames));
}

std::optional<spdlog::level::level_enum> log_level_from_environment() {
    const char* value = std::getenv(kLogLevelEnv);
    if (value == nullptr || *value == '\0') {
        return std::nullopt;
    }
    try {
        return parse_log_level(value);
    } catch (const InvalidArgument& e) {
        throw InvalidArgument(fmt::format("{}: {}", kLogLevelEnv, e.what()));
    }
}

}  // namespace maf_sandbox
