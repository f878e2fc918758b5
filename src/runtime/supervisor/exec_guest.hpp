// The guest process of one exec (exec_server.cpp serves the exec): cloned by its handler ahead of
// the request into the exec's own cgroup, hardened, then either given its launch by the handler or,
// as a spare's guest, taking the connection itself and reading the request ahead (RequestPeek). It
// reports why it could not reach execve on a close-on-exec pipe.
//
// (perf, exec round trip) The guest shares its handler's memory until its execve (CLONE_VM, as
// posix_spawn does): its execve then has no copy of the handler's memory to tear down, and
// preparing it copies no page tables: a program started by a prepared CLONE_VM child runs and is
// reaped sooner than by a prepared forked child (BENCHMARKS.md).
// Sharing memory with a process that also runs takes two rules, kept in exec_guest.cpp:
//  - the guest uses the heap (and errno) only while its handler is blocked: before it says it is
//    ready, and between accepting a connection and handing it over;
//  - from then on it makes raw system calls only (raw_syscall.hpp), on data prepared before.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "exec_server.hpp"
#include "maf_sandbox/runtime/kernel/unique_fd.hpp"
#include "maf_sandbox/runtime/wire/exec_protocol.hpp"

namespace maf_sandbox::runtime::exec_guest {

// What a guest process that accepted a connection itself says when it hands the connection to its
// handler (with the descriptor, SCM_RIGHTS).
constexpr char kLaunching = 'L';    // it read the request and is starting the program
constexpr char kAwaitLaunch = 'W';  // it could not: the handler is to read it and send the launch

// Why the child could not reach execve, sent over a close-on-exec pipe.
struct ChildFailure {
    int stage;  // 0 join cgroup, 1 ids, 2 caps, 3 chdir, 5 exec, 7 terminal (4, 6 unused)
    int error;
};

// What the guest process needs once the request is known.
struct Launch {
    std::vector<std::string> argv;
    std::vector<std::string> candidates;  // argv[0] resolved against PATH, in order
    std::vector<std::string> env;         // KEY=VALUE
    std::string cwd;
    // The guest's terminal (/dev/pts/N of the sandbox's devpts), opened by the handler for a tty
    // exec; "" for pipes.
    std::string tty_path;
};

// The guest's argv, environment, candidates for argv[0] and working directory for `call`. Throws
// std::invalid_argument for an empty argv.
Launch launch_for(const ExecCall& call, const SupervisorConfig& config);

// Takes the next connection off the supervisor's listener; -1 when the listener fails. Raw calls
// only: a guest process uses it too.
int accept_connection(int listener) noexcept;

// The stack a guest process runs on until its execve. A handler keeps it in its outermost frame,
// so that it lives as long as the handler and lies within the handler's own stack (where
// sanitizers, which track one stack per thread, accept it). One guest at a time runs on it.
struct GuestStack {
    static constexpr std::size_t kBytes = 256 * 1024;
    alignas(64) std::byte bytes[kBytes];
};

// What the guest process reads in its handler's memory: its launch, and the buffer it reads a
// request into (exec_guest.cpp).
struct GuestShared;

// A guest process cloned into its exec cgroup, hardened, and waiting for its launch on `command`,
// or in accept. Owns the process until it is reaped: destroying a Guest whose process was not
// reaped kills it first, so no guest is ever left running on memory that is gone.
struct Guest {
    Guest();
    Guest(Guest&& other) noexcept;
    Guest& operator=(Guest&& other) noexcept;
    ~Guest();

    // Waits for the process to end; its wait status (0 when there was none to wait for).
    int reap() noexcept;

    pid_t pid = -1;
    bool ready = false;  // it reached its wait for a launch (else its failure pipe says why)
    std::optional<ExecCgroupParent::Child> cgroup;
    UniqueFd stdin_fd;
    UniqueFd stdout_fd;
    UniqueFd stderr_fd;
    UniqueFd failure_fd;
    UniqueFd command_fd;
    UniqueFd handoff_fd;  // when it accepts the connection itself: the connection, or EOF
    UniqueFd pidfd;
    UniqueFd handler_oom_score;  // the handler's own oom_score_adj
    std::unique_ptr<GuestShared> shared;

  private:
    void end() noexcept;
    void take(Guest& other) noexcept;
};

// Creates the exec's cgroup and pipes and clones the guest process onto `stack`, then waits until
// it is ready: it then waits for its launch from the handler (send_launch), or, given the
// supervisor's `listener`, accepts the next connection itself and hands it over on `handoff_fd`.
// Throws when it cannot start one.
Guest prepare_guest(const ExecContext& context, GuestStack& stack, int listener = -1);

// Gives a guest waiting for its launch the `launch` and lets it go. False when it is gone.
bool send_launch(Guest& guest, const Launch& launch);

// Sets the handler's OOM score back to 0 (from the 1000 its guest inherited) once the guest has
// left the handler's memory, whose score it is: after its execve, or its end.
void restore_handler_oom_score(const Guest& guest) noexcept;

// True when a guest prepared earlier is still waiting for its Launch (guest processes cannot
// signal it, but the kernel's OOM killer or a sandbox-wide kill can end it meanwhile).
bool still_waiting(const Guest& guest);

// Kills a prepared guest that will not be used and removes its cgroup.
void discard(Guest& guest);

}  // namespace maf_sandbox::runtime::exec_guest
