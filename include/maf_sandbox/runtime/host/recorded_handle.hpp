// Records are untrusted input: the checks a handle or cgroup path read back from a record (the
// registry's record.json, the emulator's state.json) passes before anything is acted on.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>

#include "maf_sandbox/runtime/host/sandbox_process.hpp"
#include "maf_sandbox/runtime/kernel/sandbox_cgroup_names.hpp"

namespace maf_sandbox::runtime {

// The handle's sandbox_id, or for a handle an older runtime recorded (no id) the name of its
// directory, which was the id.
std::string recorded_sandbox_id(const SandboxHandle& handle);

// Throws InvalidArgument unless the handle names only the sandbox's own objects: its directory
// `sandboxes_root`/<id>, the exec socket in it, and cgroups named maf-sbx-<id>, where <id> is
// recorded_sandbox_id() (a registry id) and, when given, `expected_id`.
void check_recorded_handle(const SandboxHandle& handle, const std::filesystem::path& sandboxes_root,
                           std::string_view expected_id = {});

}  // namespace maf_sandbox::runtime
