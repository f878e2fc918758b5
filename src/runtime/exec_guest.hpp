// The guest process of one exec (exec_server.cpp serves the exec): forked by its handler ahead of
// the request into the exec's own cgroup, hardened, then either given its launch by the handler or,
// as a spare's guest, taking the connection itself and reading the request ahead (RequestPeek). It
// reports why it could not reach execve on a close-on-exec pipe.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

#include "exec_server.hpp"
#include "maf_sandbox/runtime/exec_protocol.hpp"
#include "maf_sandbox/runtime/unique_fd.hpp"

namespace maf_sandbox::runtime::exec_guest {

// What a guest process that accepted a connection itself says when it hands the connection to its
// handler (with the descriptor, SCM_RIGHTS).
constexpr char kLaunching = 'L';    // it read the request and is starting the program
constexpr char kAwaitLaunch = 'W';  // it could not: the handler is to read it and send the launch

// Why the child could not reach execve, sent over a close-on-exec pipe.
struct ChildFailure {
    int stage;  // 0 join cgroup, 1 ids, 2 caps, 3 chdir, 5 exec, 6 oom score (4 is unused)
    int error;
};

// What the guest process needs once the request is known.
struct Launch {
    std::vector<std::string> argv;
    std::vector<std::string> candidates;  // argv[0] resolved against PATH, in order
    std::vector<std::string> env;         // KEY=VALUE
    std::string cwd;
};

// The launch message the handler writes on the guest's command pipe.
std::string encode(const Launch& launch);

// The guest's argv, environment, candidates for argv[0] and working directory for `call`. Throws
// std::invalid_argument for an empty argv.
Launch launch_for(const ExecCall& call, const SupervisorConfig& config);

// Takes the next connection off the supervisor's listener; -1 when the listener fails.
int accept_connection(int listener) noexcept;

// A guest process forked into its exec cgroup, hardened, and waiting for its Launch on `command`,
// or in accept. The supervisor is single-threaded, so the child may allocate freely before execve.
struct Guest {
    pid_t pid = -1;
    std::optional<ExecCgroupParent::Child> cgroup;
    UniqueFd stdin_fd;
    UniqueFd stdout_fd;
    UniqueFd stderr_fd;
    UniqueFd failure_fd;
    UniqueFd command_fd;
    UniqueFd ready_fd;    // one byte once hardened; EOF when it died first
    UniqueFd handoff_fd;  // when it accepts the connection itself: the connection, or EOF
    UniqueFd pidfd;
};

// Creates the exec's cgroup and pipes and forks the guest process, which waits for its launch from
// the handler, or, given the supervisor's `listener`, accepts the next connection itself and hands
// it over on `handoff_fd`. Throws on failure.
Guest prepare_guest(const ExecContext& context, int listener = -1);

// True when a guest prepared earlier is still waiting for its Launch (guest processes cannot
// signal it, but the kernel's OOM killer or a sandbox-wide kill can end it meanwhile).
bool still_waiting(const Guest& guest);

// Kills a prepared guest that will not be used and removes its cgroup.
void discard(Guest& guest);

}  // namespace maf_sandbox::runtime::exec_guest
