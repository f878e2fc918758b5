// Records are untrusted input: the checks a handle or cgroup path read back from a record (the
// registry's record.json, the emulator's state.json) passes before anything is acted on.
#pragma once

#include <sys/types.h>

#include <filesystem>
#include <string>
#include <string_view>

#include "maf_sandbox/runtime/sandbox_process.hpp"

namespace maf_sandbox::runtime {

// A cgroup path read from a record is acted on (killed, removed) only when it is the sandbox
// `id`'s own: a directory named maf-sbx-<id> beneath kCgroupRoot, with no ".." in it.
bool is_sandbox_cgroup(const std::filesystem::path& path, std::string_view id);

// destroy_sandbox and open_sandbox_root apply both of these to any handle they are given.

// True when process `pid` is in a cgroup named maf-sbx-<id> in some hierarchy. Only the runtime
// (as root) makes such a cgroup and puts the sandbox's processes in it, so a pid and start time
// from a record (both public in /proc) are signalled only when this holds.
bool process_in_sandbox_cgroup(pid_t pid, std::string_view id);

// The handle's sandbox_id, or for a handle an older runtime recorded (no id) the name of its
// directory, which was the id.
std::string recorded_sandbox_id(const SandboxHandle& handle);

// Throws InvalidArgument unless the handle names only the sandbox's own objects: its directory
// `sandboxes_root`/<id>, the exec socket in it, and cgroups named maf-sbx-<id>, where <id> is
// recorded_sandbox_id() (a registry id) and, when given, `expected_id`.
void check_recorded_handle(const SandboxHandle& handle, const std::filesystem::path& sandboxes_root,
                           std::string_view expected_id = {});

}  // namespace maf_sandbox::runtime
