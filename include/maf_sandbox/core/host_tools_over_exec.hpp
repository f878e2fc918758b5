// Host tools over exec (docs/protocol.md 5.7): a guest program calls tools that run on the host,
// with exec as the only channel. The program runs detached under a launcher; it asks through
// request files that the host polls for and answers with response files, and reports its exit code
// through a file written by rename, so a half-written code is never read.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "maf_sandbox/core/sandbox.hpp"
#include "maf_sandbox/core/types.hpp"

namespace maf_sandbox {

inline constexpr const char* kCallsDirectory = "host_tool_calls";
inline constexpr const char* kShimModule = "maf_host_tools.py";
inline constexpr const char* kWorkDirectory = "work";
inline constexpr const char* kTransportDirectory = "host_tools";
inline constexpr std::uint64_t kDefaultMaxHostToolCallsPerRun = 16;
// The line the launcher prints when it started the program in a session of its own.
inline constexpr const char* kSessionMarker = "maf-host-tools: session";

// Absolute guest paths of one run. `work` (D/work) is the program's cwd and is left for the
// caller; everything else lives in the transport directory D/host_tools, removed after the run.
struct GuestRunLayout {
    std::string directory;  // D
    std::string work;
    std::string transport;
    std::string program;
    std::string shim;
    std::string launcher;
    std::string calls;
    std::string output;
    std::string exit_code;
    std::string pid;
    std::string session;
};

// The layout under `run_directory`. Throws InvalidArgument when the run directory is not absolute
// or holds `:` or a backslash, or when `program` is not a plain file name, is a transport file
// name, or would answer to an import of the shim, json, os, time or a Python startup module.
GuestRunLayout guest_run_layout(std::string_view run_directory,
                                std::string_view program = "program.py");

// The POSIX sh launcher: makes and enters `work`, rebuilds PYTHONPATH (the shim directory, then
// only inherited entries that are absolute, canonical and outside the run directory), and starts
// the program detached (setsid nohup when setsid exists, printing kSessionMarker; nohup
// otherwise). The program's output goes to the output file; its pid, its session and its exit
// code are each written to a .part file and renamed into place.
std::string launcher_script(const GuestRunLayout& layout, std::string_view interpreter = "python3");

// The guest module `maf_host_tools`: `call(name, **arguments)` claims the lowest free id with an
// exclusive `NNNN.claim`, publishes `NNNN.request.json` by rename, and polls `NNNN.response.json`
// every 0.05 s for up to `call_timeout`: a "value" is returned, a "refusal" raises HostToolError.
// A wrapper function is generated for each name that is an ASCII Python identifier, not a
// keyword and not a shim global. Throws InvalidArgument unless call_timeout is finite and > 0.
std::string host_tool_shim(const std::vector<std::string>& names = {},
                           Seconds call_timeout = Seconds{300.0});

// What the host answers to one call: exactly one of a JSON value or a refusal sentence.
struct DispatchResult {
    std::optional<std::string> value_json;
    std::optional<std::string> refusal;

    static DispatchResult value(std::string json) { return {std::move(json), std::nullopt}; }
    static DispatchResult refused(std::string why) { return {std::nullopt, std::move(why)}; }
    bool ok() const { return !refusal.has_value(); }
};

// Serves one call: the tool's name and its arguments as a JSON object text. Refuse by returning a
// refusal; an exception becomes a fixed refusal (its text stays on the host).
using HostToolDispatcher =
    std::function<Task<DispatchResult>(std::string name, std::string arguments_json)>;

struct HostToolRunOptions {
    Seconds timeout{60.0};
    Seconds poll_interval{0.2};
    std::string interpreter = "python3";
    // Calls over this number are refused; after one more request the host stops reading.
    std::uint64_t max_calls = kDefaultMaxHostToolCallsPerRun;
    // Bounds each request, each response, and the responses of the whole run.
    TransferLimits response_limits = kDefaultTransferLimits;
    // Names that get a convenience wrapper in the shim.
    std::vector<std::string> tool_names;
    Seconds call_timeout{300.0};
};

// Uploads the program, the shim and the launcher into the layout, starts the launcher, and
// supervises the run until the exit-code file appears or `options.timeout` expires, serving each
// request in id order through `dispatcher`. Returns the program's combined output and exit code
// (a launcher that fails returns its own result). On expiry the program is stopped (its session's
// process group when the launcher made one, else its pid) and SandboxProgramTimeout is thrown with
// what the kill did (`signal` sent/refused/unrecorded/unknown, `reach` group/program/nothing) and
// at most 2000 characters of output. The transport directory is removed on every exit path.
// Throws InvalidArgument before anything when timeout or poll_interval is not finite and > 0.
// `sandbox` must outlive the task.
Task<ExecResult> host_tool_calls_over_exec(Sandbox& sandbox, GuestRunLayout layout,
                                           std::string program_source,
                                           HostToolDispatcher dispatcher,
                                           HostToolRunOptions options = {});

// Removes the whole run directory (`rm -rf` from its parent) after the caller is done with
// `work`. Returns false without running anything when a layout path lies outside the run
// directory, and false on any failure; true when the directory is gone. Throws InvalidArgument
// unless `timeout` is finite and > 0.
Task<bool> reclaim_run(Sandbox& sandbox, GuestRunLayout layout, Seconds timeout = Seconds{30.0});

}  // namespace maf_sandbox
