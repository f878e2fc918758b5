// The sandbox's network beyond loopback, per egress mode. Private to the supervisor.
//
// Its three steps follow the supervisor's own:
//   1. prepare(), first thing in the host-side half (host mount and network namespaces, root):
//      allowlist forks the egress proxy here, so it stays in the host's network namespace, then
//      drops to an unprivileged host user without capabilities;
//   2. start_inside(), in PID 1 once loopback is up: allowlist binds 127.0.0.1:kGuestProxyPort in
//      the sandbox's namespace and hands the listener to the proxy (SCM_RIGHTS);
//   3. start_outside(), in the host-side half once PID 1 exists and its id maps are written:
//      unrestricted starts slirp4netns on PID 1's namespaces and waits until it is configured.
// The proxy and slirp4netns inherit the sandbox's cgroups (destroy and gc kill them) and hold the
// read end of a lifetime pipe whose only writer is PID 1: when the sandbox ends, they end.
#pragma once

#include <sys/types.h>

#include "maf_sandbox/runtime/kernel/unique_fd.hpp"
#include "maf_sandbox/runtime/wire/supervisor_config.hpp"

namespace maf_sandbox::runtime {

class GuestNetwork {
  public:
    // Throws SystemError, InvalidArgument (a bad allowlist or an unreadable hosts file).
    static GuestNetwork prepare(const SupervisorConfig& config);

    // In PID 1. Throws SystemError when the proxy does not take the listener.
    void start_inside();

    // In the host-side half after the clone. Throws SandboxEgressNotEnforced when slirp4netns
    // cannot give the sandbox a route out.
    void start_outside(const SupervisorConfig& config, pid_t pid1);

  private:
    Egress mode_ = Egress::closed;
    UniqueFd channel_;         // allowlist: PID 1's end of the socketpair to the proxy
    UniqueFd lifetime_read_;   // unrestricted: slirp4netns's exit fd
    UniqueFd lifetime_write_;  // PID 1 keeps it open for as long as it lives
};

}  // namespace maf_sandbox::runtime
