// Sizes and durations as a person types them: `512M`, `2G`, `512Mi`, `90s`, `2m`, `1m30s`. Every
// front end that takes a size or a duration reads it here, so one spelling works everywhere and a
// mistake is answered with the accepted forms rather than a numeric range.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "maf_sandbox/core/types.hpp"

namespace maf_sandbox {

// Bytes. A bare number is bytes; K, M, G, T (also Ki..Ti, KiB..TiB) are powers of 1024, as in
// Docker and the kernel's cgroup files; KB, MB, GB, TB are powers of 1000. A fraction is allowed
// with a suffix (`1.5G`) and rounds down to a whole byte. Throws InvalidArgument, whose message
// gives the accepted forms, for anything else or a value past 2^64 - 1.
std::uint64_t parse_byte_size(std::string_view text);

// Seconds. A bare number is seconds; otherwise one or more NUMBER UNIT parts, unit ms, s, m or h
// (`90s`, `2m`, `1m30s`, `500ms`, `1.5h`). Throws InvalidArgument, whose message gives the
// accepted forms, for anything else, a negative value or one past a year.
Seconds parse_duration(std::string_view text);

// The accepted forms, for --help texts.
inline constexpr const char* kByteSizeForms =
    "bytes, or 512K, 512M, 2G (1024-based; also Mi, GiB), 500MB (1000-based)";
inline constexpr const char* kDurationForms = "seconds, or 500ms, 90s, 2m, 1h, 1m30s";

}  // namespace maf_sandbox
