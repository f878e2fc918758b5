// Guest path arithmetic (POSIX semantics, never host paths) and the symlinked-ancestor walk that
// confines every path-taking Sandbox method (docs/protocol.md 5.1 and 8.8).
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "maf_sandbox/core/sandbox.hpp"
#include "maf_sandbox/core/types.hpp"

namespace maf_sandbox {

// Python's posixpath.normpath, exactly: collapses `.`, `..` and repeated slashes; keeps a leading
// `//` (but not `///`); `..` above the root collapses to the root; "" becomes ".".
std::string normpath(std::string_view path);

// posixpath.join of two parts (an absolute `tail` replaces `head`).
std::string join_guest_path(std::string_view head, std::string_view tail);

// posixpath.dirname.
std::string guest_dirname(std::string_view path);

// Resolves `path` against the working directory and returns the absolute normalised path.
// Throws ConfinementEscape on a backslash, a NUL, invalid UTF-8 (in either argument), or a result
// outside `working_directory`.
// "" and "." resolve to the working directory itself.
std::string confine_guest_path(std::string_view path, std::string_view working_directory);

// `path` relative to `base` ("" when equal), or nullopt when it is not inside it. Prefixes are
// compared component-wise, so /a/sub2 is not under /a/sub.
std::optional<std::string> guest_path_relative_to(std::string_view path, std::string_view base);

// Every directory from the root down: each ancestor of the normalised working directory
// including itself, then each component of `guest_path` relative to it. A root working directory
// contributes nothing.
std::vector<std::string> guest_directory_chain(std::string_view guest_path,
                                               std::string_view working_directory);

// An unconfined, no-follow stat of an absolute guest path (nullopt when absent).
using NoFollowStat = std::function<Task<std::optional<SandboxEntry>>(std::string absolute_path)>;

// Walks the chain of dirname(guest_path) (or guest_path itself with include_self): an absent
// directory ends the walk (success); a link throws ConfinementEscape; any other non-directory
// throws NotADirectory.
Task<void> refuse_symlinked_ancestors(NoFollowStat stat, std::string guest_path,
                                      std::string working_directory, bool include_self = false);

// A write's target once confined: the resolved absolute path and its no-follow stat.
struct GuestWriteTarget {
    std::string resolved;
    std::optional<SandboxEntry> leaf;
};

// confine_guest_path, then: the working directory itself throws ConfinementEscape; the ancestor
// walk; a leaf that is a link throws ConfinementEscape.
Task<GuestWriteTarget> confine_guest_write_target(NoFollowStat stat, std::string path,
                                                  std::string working_directory);

// confine_guest_write_target's resolved absolute path.
Task<std::string> confine_guest_write_path(NoFollowStat stat, std::string path,
                                           std::string working_directory);

// The resolved working directory of a call: an absolute one is normalised; a relative one
// resolves beneath `base`; "" and "." name the base. Throws InvalidArgument when
// `working_directory` holds a NUL or is not valid UTF-8.
std::string resolve_working_directory(std::string_view working_directory, std::string_view base);

// The per-call guest directory `{work_dir}/{12 lowercase hex}`, random each call.
std::string guest_call_path(std::string_view work_dir);

}  // namespace maf_sandbox
