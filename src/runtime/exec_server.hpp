// Inside the sandbox: serving one exec connection (a child of the supervisor per connection).
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

}  // namespace maf_sandbox::runtime
