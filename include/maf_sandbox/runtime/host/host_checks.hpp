// What this host offers the local runtime, checked one item at a time: the kernel, user
// namespaces, cgroups, ids, overlayfs, seccomp, slirp4netns, the supervisor and the image store.
// `maf-sandbox doctor` prints them; the front ends that start the local backend (run, exec, mcp)
// refuse to start with the same explanation when an item the backend cannot start without fails.
#pragma once

#include <string>
#include <vector>

namespace maf_sandbox::runtime {

enum class CheckStatus { ok, limited, missing };

struct HostCheck {
    std::string name;  // "kernel", "user namespaces", ...
    CheckStatus status = CheckStatus::ok;
    std::string detail;     // what was found
    std::string fix;        // what to do when not ok (empty when ok)
    bool blocking = false;  // the local backend cannot start while this is missing
};

// Every check, in a fixed order, for this process's mode (root or rootless). Never throws: a
// check that cannot run is reported as missing with its reason.
std::vector<HostCheck> run_host_checks();

// True when no blocking check is missing.
bool local_backend_can_start(const std::vector<HostCheck>& checks);

// One line per check: "OK      kernel: 6.18.0 ...", with "  fix: ..." under what is not OK.
std::string format_host_checks(const std::vector<HostCheck>& checks);

// Throws NoSandboxBackend listing the blocking items and their fixes when the local backend
// cannot start here; the start-up check of run, exec and mcp.
void ensure_local_backend_can_start();

}  // namespace maf_sandbox::runtime
