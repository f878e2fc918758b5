// Per-call reclaim (docs/protocol.md 5.3): removing one call's guest directory in a `finally`,
// where a failure must become a reason to log, never an exception that masks the call's own
// outcome.
#pragma once

#include <optional>
#include <string>

#include "maf_sandbox/core/sandbox.hpp"
#include "maf_sandbox/core/types.hpp"

namespace maf_sandbox {

// Removes `path` (resolved against `working_directory`) with `rm -rf '<resolved>'` run from "/".
// Returns nullopt on success, or the reason it was refused or failed: a path outside the working
// directory, the working directory itself (any spelling), fewer than two components, a failing
// exec ("the removal call failed: <type>: <message>") or a non-zero exit (code and stderr).
// Never throws, except that cancellation propagates. `sandbox` must outlive the task.
Task<std::optional<std::string>> reclaim_guest_path(Sandbox& sandbox, std::string path,
                                                    std::string working_directory, Seconds timeout);

}  // namespace maf_sandbox
