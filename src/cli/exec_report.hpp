// How every command prints an exec's outcome: stdout and stderr pass through byte for byte; past
// the output cap, the heads and then a marker on stderr naming how many bytes were dropped.
#pragma once

#include <cstdint>

#include "maf_sandbox/core/errors.hpp"
#include "maf_sandbox/core/sandbox.hpp"
#include "maf_sandbox/core/types.hpp"

namespace maf_sandbox::cli {

// Returns the command's exit status.
int report_exec(const ExecResult& result);
// Prints, on stderr, that the key's previous sandbox was discarded and this one is new (nothing
// when it was not): a script must not read a blank sandbox as the one it left files in.
void report_replacement(const Sandbox& sandbox);
// Returns the command's exit status, or kExitFailed when it was killed before it exited.
// Either returns kExitFailed, having said so on stderr, when a stream could not be written in full.
int report_output_limit(const ExecOutputLimitExceeded& error, std::uint64_t cap);
// `status`, or kExitFailed (said on stderr) when either stream's write failed with that errno
// (0: written whole).
int report_delivery(int out_error, int err_error, int status);

}  // namespace maf_sandbox::cli
