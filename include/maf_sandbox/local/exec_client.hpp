// The exec wire's host side as an Asio awaitable: runs on the caller's executor, so an exec costs
// no thread hop there and back (a visible part of a round trip on a small host). The blocking
// client, runtime::call_exec, stays for front ends without an event loop; both share the wire's
// encoding, checks, caps and error wording (maf_sandbox/runtime/wire/exec_protocol.hpp).
#pragma once

#include <chrono>
#include <filesystem>

#include "maf_sandbox/core/sandbox.hpp"
#include "maf_sandbox/runtime/host/sandbox_process.hpp"
#include "maf_sandbox/runtime/wire/exec_protocol.hpp"

namespace maf_sandbox::local {

// call_exec without blocking: connects to `socket`, sends the request and stdin in one write,
// reads output and the result. Gives up `grace` after `call.timeout` (counted from the
// connection), closing it.
// Throws what call_exec throws, with the same messages: InvalidArgument for a malformed call,
// SandboxOutputUnreachable for a refused connection, a hang-up, no answer in time or a malformed
// result. Cancelled (a terminal cancellation, or the awaiting coroutine destroyed), it closes the
// connection, which makes the supervisor kill the exec's whole process tree, and throws
// boost::system::system_error (operation_aborted). Each output frame is awaited in `sink` (when
// set) as it arrives, before the next read (maf_sandbox/core/sandbox.hpp, ExecSink); an exception
// from the sink ends the exchange (closing the connection, so the tree is killed) and propagates.
// `call` and `sink` must outlive the awaitable.
Task<runtime::ExecReply> call_exec_async(const std::filesystem::path& socket,
                                         const runtime::ExecCall& call, const ExecSink& sink = {},
                                         std::chrono::milliseconds grace = runtime::kExecGrace);

// runtime::exec_in_sandbox without blocking. `handle`, `call` and `sink` must outlive the
// awaitable.
Task<runtime::ExecReply> exec_in_sandbox_async(const runtime::SandboxHandle& handle,
                                               const runtime::ExecCall& call,
                                               const ExecSink& sink = {});

}  // namespace maf_sandbox::local
