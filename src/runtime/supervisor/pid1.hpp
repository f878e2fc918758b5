// Internal: the sandbox's PID 1 (pid1.cpp), which the supervisor's host-side half clones into
// the new namespaces, and the one line either of them reports to the host on kReadyFd.
#pragma once

#include <linux/filter.h>

#include <string_view>
#include <vector>

#include "guest_network.hpp"
#include "maf_sandbox/runtime/kernel/cgroup.hpp"
#include "maf_sandbox/runtime/wire/supervisor_config.hpp"

namespace maf_sandbox::runtime {

// Writes `line` and a newline to the host on kReadyFd: "ready", "pid N" or "error: ...".
void report_to_host(std::string_view line);

// PID 1's recipe, in the new namespaces, with the sandbox's root as the working directory: waits
// for the host-side half's `go` on `go`, confines itself step by step and serves execs from
// `listener` until the sandbox ends. Never returns.
[[noreturn]] void sandbox_init(const SupervisorConfig& config, int listener,
                               const ExecCgroupParent& cgroups,
                               const std::vector<sock_filter>& seccomp, GuestNetwork& network,
                               int go);

}  // namespace maf_sandbox::runtime
