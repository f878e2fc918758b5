// The cgroups a sandbox record names, removed by whoever finds the sandbox gone: the host's gc
// and the supervisor's owner watch.
#pragma once

#include <string>

#include "maf_sandbox/runtime/wire/registry.hpp"

namespace maf_sandbox::runtime {

// The default cleanup: kills whatever still runs in the sandbox's cgroups, found by their name
// (maf-sbx-<id>) so that a creator killed before it recorded them leaks no supervisor, removes
// them, then rmdirs every path in runtime["cgroup_paths"] that lies under /sys/fs/cgroup (deepest
// first, retried briefly while the kernel still reports it busy).
void remove_recorded_cgroups(const SandboxRecord& record);

// Kills everything in the cgroups called maf-sbx-<id> and removes them (a creator killed before it
// recorded its cgroups leaves them named only).
void destroy_cgroups_named_for(const std::string& id);

// Releases the record's host id claim (id_claims.hpp), if it has one: call once nothing of the
// sandbox runs any more (gc, and the supervisor's owner watch). Throws SystemError.
void release_recorded_ids(const SandboxRecord& record);

}  // namespace maf_sandbox::runtime
