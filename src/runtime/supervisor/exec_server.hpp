// Inside the sandbox: serving one exec connection (a child of the supervisor per connection).
//
// The hot path is kept short by preparing ahead: a "spare" handler is forked by PID 1 before any
// connection arrives; it creates the exec's child cgroup and clones the guest process (which
// shares its memory until execve: exec_guest.hpp); the guest joins that cgroup, readies itself to
// read a request, then waits in accept (still as the sandbox's root, so guest processes cannot
// signal it). The empty capability bounding set, no_new_privs and the seccomp filter are PID 1's
// own, inherited by both. A connection thus wakes the
// guest process directly: it reads the request ahead of its handler, hands the connection over,
// switches to the guest user and executes the program while the handler wakes to supervise.
#pragma once

#include <sys/types.h>

#include <atomic>

#include "maf_sandbox/runtime/kernel/cgroup.hpp"
#include "maf_sandbox/runtime/wire/supervisor_config.hpp"

namespace maf_sandbox::runtime {

struct ExecContext {
    const SupervisorConfig* config = nullptr;
    const ExecCgroupParent* cgroups = nullptr;
};

// What a spare handler tells PID 1 on its `accepted` pipe, in one write (atomic on a pipe).
struct AcceptedNote {
    static constexpr char kPrepared = 'p';  // its guest process is ready
    static constexpr char kAccepted = 'a';  // it took a connection: it is now a handler
    char what = 0;
    pid_t handler = 0;
};

// A spare handler: prepares the next guest process, which accepts one connection on `listener`,
// and notes kPrepared on `accepted_fd`; once the guest hands the connection over, notes kAccepted
// (so PID 1 forks a successor) and serves it. Accepts itself and prepares on demand when the
// prepared guest died in the meantime.
void serve_next_exec(int listener, int accepted_fd, const ExecContext& context);

}  // namespace maf_sandbox::runtime
