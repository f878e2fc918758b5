// `run -t` / `-i` and `exec -t` / `-i`: the command on a terminal in the guest (-t) and with its
// stdin forwarded as it is typed (-i), as `docker run -it` does. The host's terminal is put in raw
// mode for the exec, so every key (^C included) reaches the guest's terminal, whose line
// discipline turns ^C into the program's SIGINT; the window's size is sent at start and on each
// SIGWINCH. Local backend only: it is the one declaring Capability::terminal.
#pragma once

#include <cstdint>

#include "maf_sandbox/core/sandbox.hpp"
#include "maf_sandbox/core/types.hpp"

namespace maf_sandbox::cli {

struct TerminalOptions {
    bool tty = false;          // -t: a terminal in the guest
    bool interactive = false;  // -i: stdin stays open and is forwarded as it comes
};

// Throws InvalidArgument when the backend does not declare Capability::terminal, naming what to
// do instead. Checked before any sandbox is acquired.
void require_terminal(const SandboxBackend& backend, const TerminalOptions& options);

// Runs `request` on `sandbox` as `options` say and returns its exit status (as StreamPrinter
// reports it). The host's terminal is restored however this returns. SIGINT, SIGTERM or SIGHUP
// arriving here end the exec (its tree is killed) and throw Interrupted.
int run_on_terminal(const Sandbox& sandbox, ExecRequest request, std::uint64_t max_output,
                    const TerminalOptions& options);

}  // namespace maf_sandbox::cli
