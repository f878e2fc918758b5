// The host's side of an interactive exec (ExecCall::interactive, ExecCall::tty): the request, then
// stdin forwarded as it is read and the terminal's size as it changes, while the program's output
// is delivered as it comes. Blocking: one poll loop over the connection, the input and the
// caller's signal pipe.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <utility>

#include "maf_sandbox/runtime/wire/exec_protocol.hpp"

namespace maf_sandbox::runtime {

struct InteractiveIo {
    // Read and forwarded until its EOF (then stdin is closed in the guest); -1: none.
    int input = -1;
    // Where the caller's signal handlers write each signal's number (one byte, a self-pipe):
    // SIGWINCH sends `window_size()` again; any other signal ends the exec (the connection is
    // closed, which kills its tree) and is reported in `ended_by`. -1: none.
    int signals = -1;
    // The terminal's size now, as rows and columns (tty execs).
    std::function<std::pair<std::uint16_t, std::uint16_t>()> window_size;
};

struct InteractiveOutcome {
    ExecReply reply;   // complete unless ended_by is set
    int ended_by = 0;  // the signal that ended the exec on this side, 0 when it finished
};

// Runs `call` (validated as call_exec does; `interactive` is set here) and blocks until it
// finishes, delivering output through `on_output` as it arrives. Throws SandboxOutputUnreachable
// as call_exec does.
InteractiveOutcome call_exec_interactive(const std::filesystem::path& socket, ExecCall call,
                                         const InteractiveIo& io,
                                         const ExecOutputCallback& on_output,
                                         std::chrono::milliseconds grace = kExecGrace);

}  // namespace maf_sandbox::runtime
