// Creating, reaching and destroying one sandbox's kernel objects (supervisor process, cgroups,
// state directory). A sandbox is independent of the process that created it: everything needed
// to reach or destroy it again is in SandboxHandle, which the registry records.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <boost/json/object.hpp>

#include "maf_sandbox/core/vocabulary.hpp"
#include "maf_sandbox/runtime/egress/egress.hpp"
#include "maf_sandbox/runtime/kernel/cgroup.hpp"
#include "maf_sandbox/runtime/kernel/host_budgets.hpp"
#include "maf_sandbox/runtime/kernel/mounts.hpp"
#include "maf_sandbox/runtime/kernel/namespaces.hpp"
#include "maf_sandbox/runtime/kernel/unique_fd.hpp"
#include "maf_sandbox/runtime/wire/exec_protocol.hpp"
#include "maf_sandbox/runtime/wire/id_ranges.hpp"
#include "maf_sandbox/runtime/wire/owner.hpp"
#include "maf_sandbox/runtime/wire/sandbox_files.hpp"

namespace maf_sandbox::runtime {

struct SandboxHandle;

struct SandboxLaunch {
    std::string id;                     // names the cgroups (maf-sbx-<id>)
    std::filesystem::path sandbox_dir;  // exists; the runtime keeps its files here
    RootPlan mounts;                    // the uid/gid fields are filled in from the host ids
    uid_t guest_uid = 1000;             // inside the user namespace (0 = root inside)
    gid_t guest_gid = 1000;
    std::vector<std::pair<std::string, std::string>> env;  // the guest's whole base environment
    std::string default_cwd = "/";
    std::string hostname = "sandbox";
    CgroupLimits limits;
    std::optional<std::chrono::seconds> idle_timeout;
    std::optional<std::chrono::seconds> max_lifetime;
    std::chrono::milliseconds ready_timeout{15000};
    // Egress (closed by default). In allowlist mode the guest's environment gets http_proxy,
    // https_proxy, HTTP_PROXY and HTTPS_PROXY pointing at the proxy and no_proxy/NO_PROXY for
    // loopback; the operator options reach only the proxy, never the guest.
    EgressPolicy egress;
    EgressOperatorOptions egress_operator;
    // (perf, cold acquire) Called with the complete handle once the sandbox's PID 1 exists and
    // before it reports ready, so the caller's bookkeeping (LocalBackend's record) overlaps PID 1's
    // own set-up. If the launch then fails, launch_sandbox still throws and takes everything back.
    std::function<void(const SandboxHandle&)> on_started;
    // A one-shot sandbox: disposed within moments of this process's end (SupervisorConfig::owner).
    // Pooled: no owner yet, watched for one while its record carries this label.
    std::optional<SandboxOwner> owner;
    std::string owner_pending_label;
    // No owner now, but one may record itself later (SupervisorConfig::watch_later_owners).
    bool watch_later_owners = false;
    // The sandbox's own host identity (docs/SECURITY.md, "Identities and budgets"): a slot of
    // `id_pool` (nullopt: IdPool::from_environment()) claimed in the host-wide table at
    // `id_claims_dir` (empty: default_id_claims_dir()), admitted against, and bounded by,
    // `budgets` (nullopt: HostBudgets::from_environment()).
    std::optional<IdPool> id_pool;
    std::filesystem::path id_claims_dir;
    std::optional<HostBudgets> budgets;
};

// Everything needed to reach a sandbox again, from any process.
struct SandboxHandle {
    pid_t pid = 0;                 // the supervisor (the sandbox's PID 1), host view
    std::uint64_t start_time = 0;  // of that pid, so a reused pid is never mistaken for it
    std::filesystem::path sandbox_dir;
    std::filesystem::path socket;
    CgroupLayout cgroup_layout = CgroupLayout::v1;
    std::vector<std::filesystem::path> cgroups;
    uid_t guest_host_uid = 0;  // the guest user as the host sees it (owner of written files)
    gid_t guest_host_gid = 0;
    std::string sandbox_id;  // SandboxLaunch::id
    // The sandbox's host ids and the claim table they are held in (empty: a handle recorded by an
    // older runtime, whose sandboxes all had kDefaultIdMapping and no claim).
    IdMapping ids = kDefaultIdMapping;
    std::filesystem::path id_claims_dir;

    // The registry record's `runtime` object ("cgroup_paths" is the key gc understands).
    boost::json::object runtime_json() const;
    static SandboxHandle from_runtime_json(pid_t pid, std::uint64_t start_time,
                                           const boost::json::object& runtime);
};

// Claims the sandbox's host ids, then starts the supervisor detached (own session and process
// group, already in the sandbox's cgroups; its host-side half is reaped here, and the sandbox's
// PID 1 belongs to init) and waits until it reports ready (PID 1 serving; the first exec's guest
// process may still be in preparation). On any failure everything made so far, the claim
// included, is removed. Throws SandboxCapacityExceeded before anything is made when the host has
// no room for the sandbox (pid budget, id pool, file share), SandboxCapabilityNotSupported when
// a limit cannot be enforced here, SystemError when the kernel refuses a step (the message
// carries the supervisor's reason).
SandboxHandle launch_sandbox(const SandboxLaunch& launch);

// True while the supervisor runs (pid exists, is not a zombie, start time matches).
bool sandbox_alive(const SandboxHandle& handle);

// Kills the sandbox's PID 1 (and with it its PID namespace) and waits for it to end, then kills
// whatever else is in its cgroups, removes the cgroups and the sandbox directory, and releases
// its host id claim. Idempotent.
// Throws SystemError when something could not be removed.
void destroy_sandbox(const SandboxHandle& handle);

// /proc/<pid>/root opened O_PATH: a directory fd on the sandbox's root, for GuestFs. Throws
// SandboxOutputUnreachable when the supervisor is gone.
UniqueFd open_sandbox_root(const SandboxHandle& handle);

// call_exec for a sandbox (the reply's OOM kill count comes from the supervisor).
ExecReply exec_in_sandbox(const SandboxHandle& handle, const ExecCall& call);

// --- Egress -------------------------------------------------------------------------------------

// egress_log_path, slirp_log_path: wire/sandbox_files.hpp (the supervisor writes those logs).

// The egress modes this host enforces, checked now: closed and allowlist always, unrestricted only
// when slirp4netns is installed and /dev/net/tun opens (egress_modes.cpp).
std::vector<Egress> enforceable_egress_modes();

// Why `mode` is not enforceable here (empty when it is), for a SandboxEgressNotEnforced message.
std::string egress_unavailable_reason(Egress mode);

// Where the supervisor executable is: $MAF_SANDBOX_SUPERVISOR, else next to the running
// executable, else where the build put it. Throws SandboxCapabilityNotSupported when none exists.
std::filesystem::path supervisor_executable();

// Field 22 of /proc/<pid>/stat; nullopt when the process is gone or a zombie.
std::optional<std::uint64_t> live_process_start_time(pid_t pid);

}  // namespace maf_sandbox::runtime
