// The log level a person names, the same way on every binary: `--log-level LEVEL` (and `-v` on the
// command line front ends), or MAF_SANDBOX_LOG in the environment when no flag says otherwise.
#pragma once

#include <optional>
#include <string_view>

#include <spdlog/common.h>

namespace maf_sandbox {

inline constexpr const char* kLogLevelEnv = "MAF_SANDBOX_LOG";
inline constexpr const char* kLogLevelNames = "trace, debug, info, warn, error or off";

// trace, debug, info, warn (or warning), error, off, in any case. Throws InvalidArgument naming
// the levels for anything else.
spdlog::level::level_enum parse_log_level(std::string_view name);

// MAF_SANDBOX_LOG's level, or nullopt when it is unset or empty. Throws InvalidArgument naming the
// variable and the levels when it names none.
std::optional<spdlog::level::level_enum> log_level_from_environment();

}  // namespace maf_sandbox
