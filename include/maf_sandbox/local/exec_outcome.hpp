// The protocol's exec over the runtime's wire, in both directions: an ExecRequest as the
// supervisor's ExecCall, and its ExecReply as the protocol's result or typed error. LocalSandbox
// and the CLI's lean front end share it, so an exec reads the same whichever path ran it.
#pragma once

#include <cstdint>
#include <string_view>

#include "maf_sandbox/core/types.hpp"
#include "maf_sandbox/runtime/wire/exec_protocol.hpp"

namespace maf_sandbox::local {

// Throws InvalidArgument for a non-positive timeout or a bad working directory.
runtime::ExecCall exec_call_for(ExecRequest request, std::string_view base_directory,
                                std::uint64_t default_max_output);

// The result, or: SandboxExecTimeout (the tree was killed at the deadline; carries the heads),
// Error (the supervisor could not run it), ExecOutputLimitExceeded (a stream passed the cap;
// carries the heads and the total).
ExecResult exec_result_of(const runtime::ExecReply& reply, const runtime::ExecCall& call);

}  // namespace maf_sandbox::local
