// Outputs named by pattern (private to src/kinds): a name or a glob, matched against the call
// directory through the backend's own confined listing (list_dir and stat_file, which report links
// as links). A link is never followed nor matched, so a pattern only ever names regular files the
// program left inside its own directory.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "maf_sandbox/core/sandbox.hpp"

namespace maf_sandbox::kinds::detail {

// How many patterns one call may name; the files they match are capped by the spec's files_out.
inline constexpr std::size_t kMaxOutputPatterns = 32;

// Why `pattern` cannot be used (a sentence a model can act on), or nullopt. A pattern is a
// relative `/`-separated path whose segments may use `*`, `?` and `[...]` (no `**`); no segment
// may be empty, `.` or `..`, and the whole follows the artifact-name rules otherwise.
std::optional<std::string> output_pattern_problem(std::string_view pattern);

struct PatternMatches {
    // The matched files, relative to the directory, sorted, each once.
    std::vector<std::string> names;
    // The patterns that matched no regular file.
    std::vector<std::string> unmatched;
};

// Matches each pattern inside `directory` (absolute, in the guest). Stops once more than
// `max_names` files matched, so a caller that caps at `max_names` still sees it was exceeded.
// A segment that names a missing entry, or a link, matches nothing.
Task<PatternMatches> match_output_patterns(Sandbox& sandbox, std::string directory,
                                           std::vector<std::string> patterns,
                                           std::size_t max_names);

}  // namespace maf_sandbox::kinds::detail
