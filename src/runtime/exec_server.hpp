// Inside the sandbox: serving one exec connection (a child of the supervisor per connection).
//
// The hot path is kept short by preparing ahead: a "spare" handler is forked by PID 1 before any
// connection arrives; it creates the exec's child cgroup and forks the guest process, which joins
// that cgroup, empties its capability bounding set, sets no_new_privs and installs the seccomp
// filter, then waits for its argv (still as the sandbox's root, so guest processes cannot signal
// it). Only then does the spare accept a connection, so an exec costs a pipe write, the switch to
// the guest user, the last capability drop and the guest's own execve.
#pragma once

#include <linux/filter.h>
#include <atomic>
#include <vector>

#include "maf_sandbox/runtime/cgroup.hpp"
#include "maf_sandbox/runtime/supervisor.hpp"

namespace maf_sandbox::runtime {

struct ExecContext {
    const SupervisorConfig* config = nullptr;
    const ExecCgroupParent* cgroups = nullptr;
    const std::vector<sock_filter>* seccomp = nullptr;
};

// Reads one request from `connection`, runs it in its own child cgroup and streams the outcome
// back. Returns when the exec is over (finished, timed out, or the host hung up).
void serve_exec(int connection, const ExecContext& context);

// The spare handler: prepares the next guest process and writes 'p' to `accepted_fd`, then accepts
// one connection on `listener`, writes 'a' (so PID 1 forks the next spare at once) and serves it.
// Falls back to preparing on demand when the prepared guest died in the meantime.
void serve_next_exec(int listener, int accepted_fd, const ExecContext& context);

}  // namespace maf_sandbox::runtime
