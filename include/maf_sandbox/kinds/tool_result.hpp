// What a kind's tool call hands back to its host (and, through the MCP server, to a model): which
// backend, rung and egress mode produced it, the program's own output, what landed, and, when the
// call could not complete, one fixed actionable sentence. Details never travel here; they go to the
// host's log.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "maf_sandbox/core/outputs.hpp"
#include "maf_sandbox/core/types.hpp"
#include "maf_sandbox/core/vocabulary.hpp"

namespace maf_sandbox::kinds {

class SandboxAllowance;

// The program's output as it is produced, for hosts that show it live (MCP progress). Called on
// the call's executor, one piece at a time; it must not block (the program waits while it runs).
// A piece is no line: it may end mid-line or mid-character.
using OutputObserver = std::function<void(ExecStreamName stream, std::string_view bytes)>;

// Who is calling, read from the host's request context for every call. Tool arguments never
// reach it, so no model input can choose or change a sandbox key.
struct CallerContext {
    std::string scope;
    // Unset or empty: the call is not bound to a conversation and is refused.
    std::optional<std::string> thread_id;
    std::string agent_dir;
    // How many sandboxes this caller may hold (sandbox_allowance.hpp); unset: no cap. A call that
    // would go over it is refused before anything is acquired.
    std::shared_ptr<SandboxAllowance> allowance;
    // Where the program's output goes while it runs; only a backend that declares streaming_exec
    // delivers it (the others answer at the end, and the result carries the output either way).
    OutputObserver output;
    // Where this call's outputs land, when the host gives each call a landing place of its own
    // (an MCP session: one directory per call, and the files handed back to the client). Unset:
    // the tool's own sink.
    std::optional<OutputSink> output_sink;
};

// Lets the host classify a result: which backend ran it, at which rung, with which egress.
struct ResultProvenance {
    std::string backend;
    Isolation isolation = Isolation::none;
    Egress egress = Egress::closed;
};

// The program's own streams (text views, invalid UTF-8 replaced) and exit code.
struct ProgramOutput {
    std::string stdout_text;
    std::string stderr_text;
    int exit_code = 0;
};

// Why a call did not complete normally.
enum class CallFailure {
    none,
    refused,          // the model's input was refused (unbound call, name not in store, caps)
    output_over_cap,  // the program wrote more than the output cap: refused, head shown
    timed_out,        // the program overran the configured timeout
    infrastructure,   // the sandbox or the host failed; details are in the log
};

struct ToolResult {
    ResultProvenance provenance;
    CallFailure failure = CallFailure::none;
    // The fixed sentence for a failure; empty when the call completed.
    std::string message;
    // Present when the program ran (also when its outputs could not be landed, or its output went
    // over the cap: then the streams hold the head that arrived).
    std::optional<ProgramOutput> program;
    // For output_over_cap: bytes the program wrote beyond the head shown.
    std::size_t dropped_bytes = 0;
    // One display line per landed output ("summary.json (120 bytes)"); never a host path.
    std::vector<std::string> landed;
    // Output patterns (named by the call or the host) that matched no file the program wrote.
    std::vector<std::string> unmatched_outputs;
    // The conversation's previous sandbox was discarded by the backend after a failure and this
    // call ran in a new one: files and processes earlier calls left are gone.
    bool sandbox_replaced = false;

    // False for a program that ran to completion, whatever its exit code.
    bool is_error() const { return failure != CallFailure::none; }
    // The text a model reads: the failure sentence (if any), the program's exit code and streams,
    // the landed outputs and a closing provenance line.
    std::string text() const;
};

// Progress of one call, for hosts that report it (MCP progress notifications). `progress` grows
// monotonically; `total` is the number of steps when known.
using ProgressReporter =
    std::function<void(double progress, std::optional<double> total, std::string message)>;

}  // namespace maf_sandbox::kinds
