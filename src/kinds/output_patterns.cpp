#include "output_patterns.hpp"

#include <fmt/format.h>
#include <fnmatch.h>

#include <algorithm>
#include <set>
#include <utility>

#include "maf_sandbox/core/errors.hpp"
#include "maf_sandbox/core/outputs.hpp"
#include "maf_sandbox/core/paths.hpp"
#include "maf_sandbox/core/utf8.hpp"

namespace maf_sandbox::kinds::detail {
namespace {

std::vector<std::string> split(std::string_view pattern) {
    std::vector<std::string> parts;
    std::size_t start = 0;
    for (;;) {
        const auto slash = pattern.find('/', start);
        parts.emplace_back(pattern.substr(start, slash - start));
        if (slash == std::string_view::npos) {
            return parts;
        }
        start = slash + 1;
    }
}

bool has_wildcard(std::string_view segment) {
    return segment.find_first_of("*?[") != std::string_view::npos;
}

std::string join_relative(const std::string& head, const std::string& tail) {
    return head.empty() ? tail : head + "/" + tail;
}

// The entry's own name: backends report paths relative to the working directory.
std::string leaf(const std::string& path) {
    const auto slash = path.rfind('/');
    return slash == std::string::npos ? path : path.substr(slash + 1);
}

bool matches(const std::string& segment, const std::string& name) {
    // FNM_PERIOD: `*` does not match a hidden file, as in a shell.
    return ::fnmatch(segment.c_str(), name.c_str(), FNM_PERIOD) == 0;
}

// One level of a pattern walk: the entries of `relative` (a directory) whose kind is `kind`
// and whose name matches `segment`, relative to the walk's directory.
Task<std::vector<std::string>> matching_children(Sandbox& sandbox, const std::string& directory,
                                                 const std::string& relative,
                                                 const std::string& segment, EntryKind kind) {
    std::vector<std::string> found;
    if (!has_wildcard(segment)) {
        const auto candidate = join_relative(relative, segment);
        const auto entry = co_await sandbox.stat_file(candidate, directory);
        if (entry && entry->kind == kind) {
            found.push_back(candidate);
        }
        co_return found;
    }
    // Computed before the co_await: g++ 12 destroys a conditional's temporary twice across a
    // suspension.
    std::string listed = directory;
    if (!relative.empty()) {
        listed = join_guest_path(directory, relative);
    }
    std::vector<SandboxEntry> entries;
    try {
        entries = co_await sandbox.list_dir(std::move(listed), directory);
    } catch (const FileNotFound&) {
        co_return found;
    } catch (const NotADirectory&) {
        co_return found;
    }
    for (const auto& entry : entries) {
        auto name = leaf(entry.path);
        if (entry.kind == kind && matches(segment, name)) {
            found.push_back(join_relative(relative, name));
        }
    }
    co_return found;
}

}  // namespace

std::optional<std::string> output_pattern_problem(std::string_view pattern) {
    try {
        validate_artifact_name(pattern);
    } catch (const SandboxArtifactNameInvalid&) {
        return fmt::format(
            "'{}' cannot name an output: use a relative path inside the working directory, "
            "without '..', empty segments or control characters",
            bounded_utf8(pattern, 120));
    }
    for (const auto& segment : split(pattern)) {
        if (segment.find("**") != std::string::npos) {
            return fmt::format(
                "'{}' uses '**', which is not supported; name each directory level with '*'",
                bounded_utf8(pattern, 120));
        }
    }
    return std::nullopt;
}

Task<PatternMatches> match_output_patterns(Sandbox& sandbox, std::string directory,
                                           std::vector<std::string> patterns,
                                           std::size_t max_names) {
    PatternMatches result;
    std::set<std::string> seen;
    for (const auto& pattern : patterns) {
        const auto segments = split(pattern);
        // Directories reached so far, one level of the pattern at a time.
        std::vector<std::string> level{std::string()};
        for (std::size_t i = 0; i + 1 < segments.size() && !level.empty(); ++i) {
            std::vector<std::string> next;
            for (const auto& relative : level) {
                auto children = co_await matching_children(sandbox, directory, relative,
                                                           segments[i], EntryKind::directory);
                next.insert(next.end(), children.begin(), children.end());
            }
            level = std::move(next);
        }
        bool matched = false;
        for (const auto& relative : level) {
            auto files = co_await matching_children(sandbox, directory, relative, segments.back(),
                                                    EntryKind::file);
            for (auto& file : files) {
                matched = true;
                if (seen.insert(file).second) {
                    result.names.push_back(std::move(file));
                }
                if (result.names.size() > max_names) {
                    std::sort(result.names.begin(), result.names.end());
                    co_return result;
                }
            }
        }
        if (!matched) {
            result.unmatched.push_back(pattern);
        }
    }
    std::sort(result.names.begin(), result.names.end());
    co_return result;
}

}  // namespace maf_sandbox::kinds::detail
