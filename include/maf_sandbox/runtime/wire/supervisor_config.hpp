// The resident supervisor of one sandbox: the `maf-sandbox-supervisor` executable.
//
// Launched detached by SandboxProcess (own session, already inside the sandbox's cgroups) with
// argv[0] "maf-sandbox-supervisor" alone, its JSON config on fd kConfigFd and a ready pipe as fd 3.
// Its host-side half builds the root filesystem in a private mount namespace, binds the exec socket
// and clones PID 1 of the new user, mount, PID, IPC, UTS, network and cgroup namespaces, then
// exits. PID 1 pivots into the root, reports "ready" (or "error: ...") on the pipe and serves execs
// until its idle timeout or absolute lifetime expires, when it exits and the kernel ends every
// process of the sandbox.
//
// Egress (SupervisorConfig::egress): `closed` leaves the network namespace with loopback only.
// `allowlist` forks the egress proxy from the host-side half before anything else, so it stays in
// the host's mount, network and PID namespaces, drops to the guest's unprivileged host uid with
// no capabilities, and serves a listener PID 1 creates on 127.0.0.1:kGuestProxyPort (decision log:
// <sandbox_dir>/egress.log). `unrestricted` runs slirp4netns on PID 1's namespaces. Both helpers
// stay in the sandbox's cgroups and end when PID 1 does (they watch a pipe only PID 1 holds).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <boost/json/value.hpp>

#include "maf_sandbox/runtime/egress/egress.hpp"
#include "maf_sandbox/runtime/kernel/cgroup.hpp"
#include "maf_sandbox/runtime/kernel/host_budgets.hpp"
#include "maf_sandbox/runtime/kernel/mounts.hpp"
#include "maf_sandbox/runtime/kernel/namespaces.hpp"
#include "maf_sandbox/runtime/kernel/rootless.hpp"
#include "maf_sandbox/runtime/kernel/seccomp.hpp"
#include "maf_sandbox/runtime/wire/owner.hpp"

namespace maf_sandbox::runtime {

// The fd the ready pipe arrives on.
inline constexpr int kReadyFd = 3;
// The fd the launcher sends the sandbox's cgroups on (one CgroupPlacement line, then EOF).
inline constexpr int kCgroupFd = 4;
// The fd the supervisor's JSON config arrives on (a memfd, read to its end). Not a path on the
// command line: the sandbox's PID 1 is a fork of the supervisor, so its /proc/1/cmdline would show
// the guest a host directory (the host's layout stays private).
inline constexpr int kConfigFd = 5;
// The fd holding the lock of the sandbox's host id claim (id_claims.hpp): PID 1 keeps it open (it
// is close-on-exec, so no guest program has it) for as long as the sandbox lives.
inline constexpr int kIdClaimFd = 6;

// (perf, cold acquire) The sandbox's cgroups, which the launcher creates while the supervisor
// starts (its exec, its config, and with closed egress its mounts) instead of before: on two
// cores the mkdirs and limit writes (one set per v1 hierarchy) overlap them. The
// supervisor joins them before anything of the sandbox runs: before it forks the egress proxy,
// and in every case before it clones the sandbox's PID 1 (whose cgroup namespace is rooted there).
struct CgroupPlacement {
    CgroupLayout layout = CgroupLayout::v1;
    std::vector<std::filesystem::path> delegated;   // SupervisorConfig::delegated_cgroups
    std::vector<std::filesystem::path> join_files;  // SandboxCgroup::join_files
    std::filesystem::path oom_kill_count_file;      // SandboxCgroup::oom_kill_count_file
};
std::string to_line(const CgroupPlacement& placement);              // JSON, then a newline
CgroupPlacement cgroup_placement_from_line(std::string_view line);  // throws on bad JSON

struct SupervisorConfig {
    std::string id;
    std::filesystem::path sandbox_dir;  // host path; the root and the socket live here
    std::filesystem::path socket_path;
    RootPlan mounts;
    IdMapping ids;
    uid_t guest_uid = 0;  // inside the user namespace
    gid_t guest_gid = 0;
    std::vector<std::pair<std::string, std::string>> base_env;  // the guest's whole environment
    std::string default_cwd = "/";
    std::string hostname = "sandbox";
    CgroupLayout cgroup_layout = CgroupLayout::v1;
    std::vector<std::filesystem::path> delegated_cgroups;
    std::filesystem::path oom_kill_count_file;  // empty: none (no memory controller)
    std::optional<std::chrono::seconds> idle_timeout;
    std::optional<std::chrono::seconds> max_lifetime;
    // closed: loopback only. allowlist: the host-side half forks the egress proxy (host network
    // namespace, unprivileged) and PID 1 hands it a listener on 127.0.0.1:kGuestProxyPort.
    // unrestricted: slirp4netns gives the namespace a route out.
    EgressPolicy egress;
    EgressOperatorOptions egress_operator;
    // (perf, cold acquire) The guest's seccomp filter as BPF, compiled once per launching process
    // (guest_seccomp_program) instead of by every supervisor at start (libseccomp's compile is a
    // visible part of a cold start). Required: a config without it is refused, never run
    // unfiltered.
    std::vector<sock_filter> seccomp;
    // A one-shot sandbox (owner.hpp): the process whose end disposes it, watched from the host
    // side by the supervisor's owner watch (owner_watch.hpp). A pooled sandbox has no owner yet:
    // its record carries owner_pending_label until a taker records one there.
    std::optional<SandboxOwner> owner;
    std::string owner_pending_label;
    // A sandbox made without an owner for a conversation: watched for owners that record
    // themselves later (owner_watch.hpp), and disposed when the last of them ends.
    bool watch_later_owners = false;
    // Resource limits and user namespace limits (host_budgets.hpp). Absent from an older
    // launcher's config: nothing is set, as before.
    SandboxBudgets budgets;
    // Rootless mode (rootless.hpp): the supervisor enters this user namespace first, and every id
    // above (mounts, guest) is then an id of that namespace, not a host id. Absent: host root.
    std::optional<RootlessIdMap> rootless;
};

boost::json::value to_json(const SupervisorConfig& config);
SupervisorConfig supervisor_config_from_json(const boost::json::value& json);

}  // namespace maf_sandbox::runtime
