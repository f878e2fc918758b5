// (perf, cold acquire) The sandbox's network namespace for closed egress, made by a short-lived
// child process while the supervisor builds the sandbox's root: on two cores the network
// namespace's set-up (most of the cost of cloning the sandbox's namespaces)
// overlaps the mounts instead of following them.
//
// The namespace has loopback only, up. It is owned by the host's user namespace rather than the
// sandbox's, so the sandbox's root cannot reconfigure it (interfaces, addresses, routes, raw
// sockets); as container engines do, ports below 1024 and ICMP echo sockets are open to every
// user inside, which a root of the sandbox's own network namespace could otherwise do.
#pragma once

#include <sys/types.h>

#include "maf_sandbox/runtime/kernel/unique_fd.hpp"

namespace maf_sandbox::runtime {

class PendingLoopbackNamespace {
  public:
    // Forks the child that makes the namespace. Throws SystemError.
    static PendingLoopbackNamespace start();

    // Waits for the namespace and returns a descriptor of it (for setns); the child then exits.
    // Throws SystemError naming what failed in the child.
    UniqueFd take();

    PendingLoopbackNamespace(PendingLoopbackNamespace&& other) noexcept;
    PendingLoopbackNamespace& operator=(PendingLoopbackNamespace&&) = delete;
    PendingLoopbackNamespace(const PendingLoopbackNamespace&) = delete;
    PendingLoopbackNamespace& operator=(const PendingLoopbackNamespace&) = delete;
    // Ends and reaps the child if the namespace was never taken.
    ~PendingLoopbackNamespace();

  private:
    PendingLoopbackNamespace(pid_t child, UniqueFd status, UniqueFd hold)
        : child_(child), status_(std::move(status)), hold_(std::move(hold)) {}
    void reap() noexcept;

    pid_t child_ = -1;
    UniqueFd status_;  // the child writes its outcome here
    UniqueFd hold_;    // the child lives until this closes
};

}  // namespace maf_sandbox::runtime
