// Records are untrusted input: the checks a cgroup path or pid read back from a record passes
// before it is killed or removed. A sandbox's cgroups are named maf-sbx-<id>.
#pragma once

#include <sys/types.h>

#include <filesystem>
#include <string_view>

namespace maf_sandbox::runtime {

// A cgroup path read from a record is acted on (killed, removed) only when it is the sandbox
// `id`'s own: a directory named maf-sbx-<id> beneath kCgroupRoot, with no ".." in it.
bool is_sandbox_cgroup(const std::filesystem::path& path, std::string_view id);

// True when process `pid` is in a cgroup named maf-sbx-<id> in some hierarchy. Only the runtime
// (as root) makes such a cgroup and puts the sandbox's processes in it, so a pid and start time
// from a record (both public in /proc) are signalled only when this holds.
bool process_in_sandbox_cgroup(pid_t pid, std::string_view id);

}  // namespace maf_sandbox::runtime
