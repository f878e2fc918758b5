// The call discipline both kinds share (private to src/kinds): the key from the host context, the
// per-call guest directory, acquire through the router with failures turned into fixed sentences,
// the program run with its own output bounded, and the cleanup in a finally.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "maf_sandbox/core/router.hpp"
#include "maf_sandbox/core/sandbox.hpp"
#include "maf_sandbox/kinds/sandbox_allowance.hpp"
#include "maf_sandbox/kinds/tool_result.hpp"

namespace spdlog {
class logger;
}

namespace maf_sandbox::kinds::detail {

// One tool's binding: host configuration only, fixed for the tool's life.
struct KindBinding {
    std::shared_ptr<SandboxRouter> router;
    SandboxSpec spec;
    Seconds timeout;
    std::uint64_t max_output_bytes;
    Seconds cleanup_timeout;
    std::shared_ptr<spdlog::logger> log;
    std::string tool_name;
};

// What one call works in once its sandbox is acquired.
struct CallSite {
    SandboxKey key;
    std::shared_ptr<Sandbox> sandbox;
    std::string call_path;  // `{work_dir}/{12 hex}`, absolute
};

// Echoes a model- or guest-chosen string in a refusal: at most 120 characters, then
// " (truncated)".
std::string bounded_echo(std::string_view text);

ResultProvenance provenance_of(const KindBinding& binding);

// A result carrying only a failure sentence.
ToolResult failed(const KindBinding& binding, CallFailure failure, std::string message);

// The call's key, or a refusal when the host context binds no conversation.
std::optional<SandboxKey> key_for(const CallerContext& caller);
ToolResult unbound_call_refusal(const KindBinding& binding);

// The fixed sentence for a failed acquire (policy refusals, no backend, a backend failure).
std::string acquire_sentence(const std::exception_ptr& error);

// The refusal for a call that would hold more than the caller's `cap` sandboxes.
ToolResult over_allowance_refusal(const KindBinding& binding, std::size_t cap);

using CallBody = std::function<Task<void>(CallSite&, ToolResult&)>;

// Allocates the call directory, acquires (failures become fixed sentences, details to the log),
// runs `body`, and then ALWAYS removes the call directory and, at isolation scope `call`, disposes
// the call's sandbox. The key names the call only at scope `call`; at `conversation` every call
// of the conversation reaches its one sandbox. The directory goes through the router's
// cleanup_call where the backend declares reclaim (or at call scope); at conversation scope on a
// backend that withholds reclaim, the guest removes it (reclaim_guest_path), so the conversation
// keeps its sandbox. A
// cancelled call is cleaned up within min(cleanup_timeout, 2 s) and its cancellation rethrown.
// With an `allowance`, a call that would hold more sandboxes than it allows is refused before
// anything is acquired, and a call-scoped sandbox gives its place back when it is disposed.
Task<ToolResult> run_in_call_directory(const KindBinding& binding, SandboxKey key, CallBody body,
                                       const ProgressReporter& progress,
                                       std::shared_ptr<SandboxAllowance> allowance = nullptr);

// Runs one program in the call directory with the binding's timeout and output cap and fills
// `result`: the program's own streams and exit code, or a fixed sentence for a timeout, an
// over-cap output (head shown, dropped bytes counted) or a sandbox failure. Returns true when
// the program ran to completion (whatever its exit code). With an `output` observer and a
// backend that declares streaming_exec, the program's output also reaches it as it is written.
Task<bool> run_program(const KindBinding& binding, CallSite& site, Command command,
                       ToolResult& result, OutputObserver output = {});

}  // namespace maf_sandbox::kinds::detail
