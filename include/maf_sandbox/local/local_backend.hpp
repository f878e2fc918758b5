// LocalBackend: the protocol over the local Linux runtime (namespaces, cgroups, seccomp).
//
// Isolation `container`. Every sandbox is recorded in the on-disk registry under the state
// directory, so it outlives the process that created it and any process can reuse or purge it.
// File operations are native: paths are resolved with openat2(RESOLVE_IN_ROOT |
// RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS) on the sandbox's root, so checking a path and using
// it are one kernel step and a link swapped in mid-operation can never redirect it outside the
// sandbox. That is stronger than ACAS, whose stat-then-act walk has a documented confinement
// residual.
#pragma once

#include <chrono>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "maf_sandbox/core/sandbox.hpp"
#include "maf_sandbox/core/types.hpp"
#include "maf_sandbox/runtime/egress/egress.hpp"
#include "maf_sandbox/runtime/kernel/host_budgets.hpp"
#include "maf_sandbox/runtime/kernel/rootless.hpp"
#include "maf_sandbox/runtime/wire/id_ranges.hpp"

namespace maf_sandbox::local {

struct LocalBackendConfig {
    std::filesystem::path state_dir;  // empty: MAF_SANDBOX_STATE_DIR or /var/lib/maf-sandbox
    std::string default_image = "host";
    // Rootless, memory and CPU have no control (rootless.hpp): their defaults are none, and an
    // explicit value is refused at launch rather than dropped.
    std::uint64_t memory_bytes = runtime::running_rootless() ? 0 : 1ull << 30;
    std::uint64_t pids = 512;
    double cpus = runtime::running_rootless() ? 0.0 : 1.0;
    std::uint64_t disk_bytes = 2ull << 30;
    std::uint64_t tmp_bytes = 512ull << 20;
    // Transfer ceilings: native transfer is cheap, so these are far above the 8 MiB default.
    TransferLimits transfer_limits{1ull << 30, 4ull << 30, 10000};
    std::optional<std::chrono::seconds> idle_timeout = std::chrono::hours(1);
    std::optional<std::chrono::seconds> max_lifetime = std::chrono::hours(24);
    // Run guest commands as root inside the user namespace (still unprivileged on the machine)
    // instead of the image's user.
    bool root_inside = false;
    // Per-stream output cap when an exec does not name one.
    std::uint64_t default_max_output_bytes = 1ull << 20;
    // How many pre-built sandboxes to keep ready per (image, work directory) for creates with
    // closed egress: a create then takes one (relabelled) and a refill runs in the background.
    // 0 = no pool. Pooled sandboxes are registry records labelled maf-pool=<signature>; the
    // backend destroys the ones it made and nobody took when it is destroyed.
    std::size_t pool_size = 0;
    // Operator switches for the egress proxy (a hosts file, private addresses). Only whoever builds
    // the backend sets them (the CLI: EgressOperatorOptions::from_environment()); no spec can.
    runtime::EgressOperatorOptions egress_operator;
    // Each sandbox's own host identity and its bounds on the host's shared budgets
    // (docs/SECURITY.md, "Identities and budgets"): the host id pool (nullopt:
    // $MAF_SANDBOX_ID_POOL or the documented default), the host-wide claim table (empty:
    // $MAF_SANDBOX_ID_CLAIMS or /run/maf-sandbox/ids) and the budgets (nullopt: the defaults and
    // their environment variables). A create the host has no room for throws
    // SandboxCapacityExceeded.
    std::optional<runtime::IdPool> id_pool;
    std::filesystem::path id_claims_dir;
    std::optional<runtime::HostBudgets> budgets;
    // Every sandbox this backend creates names this process as its owner (runtime/owner.hpp), as
    // a call's sandbox does: a long-lived front end (the MCP server) killed by any signal takes
    // its sandboxes with it, and gc reclaims them should their owner watch be gone too.
    bool owned_by_this_process = false;
};

// What `ls` shows about one sandbox.
struct LocalSandboxInfo {
    std::string id;
    std::map<std::string, std::string> labels;
    std::string image;
    std::string state;  // creating, running, stopping, dead
};

class LocalBackend final : public SandboxBackend {
  public:
    explicit LocalBackend(LocalBackendConfig config = {});
    ~LocalBackend() override;

    std::string name() const override { return "local"; }
    Isolation isolation() const override { return Isolation::container; }
    BackendDeclarations declarations() const override;

    // Get-or-create by the identity labels (scope, thread, agent, kind, call), serialised per key
    // and kind across threads and processes. Throws SandboxEgressNotEnforced for an egress mode
    // not in declarations() (checked at construction), EgressPolicyConflict when the warm sandbox
    // of the key was created with another egress policy (it is kept), InvalidArgument for an
    // unknown image or a malformed egress_allow entry, SandboxCapabilityNotSupported when a limit
    // cannot be enforced on this host; nothing is left behind on failure.
    Task<std::shared_ptr<Sandbox>> acquire(SandboxKey key, SandboxSpec spec) override;
    Task<std::optional<DisposalFailure>> dispose(SandboxKey key,
                                                 std::optional<std::string> kind) override;
    Task<ScopePurge> dispose_scope(std::string scope, std::string thread_id) override;
    Task<void> close() override;

    // For the CLI, synchronous. `selector` items are `k=v` (InvalidArgument when malformed).
    std::vector<LocalSandboxInfo> list(const std::vector<std::string>& selector) const;
    // The egress proxy's decisions for one sandbox (allowlist mode; empty otherwise), oldest
    // first. Throws InvalidArgument for a malformed id or when there is no such sandbox (its log
    // goes with it).
    std::vector<runtime::EgressDecision> egress_decisions(const std::string& id) const;
    // Destroys one sandbox by id; false when there is none.
    bool remove(const std::string& id);
    // The live sandbox with this id (as `list` shows it), for the CLI's `exec --id` and `cp`: its
    // key is not asked for, so no sandbox is created or reconciled. A pooled one nobody has taken
    // is not offered. Throws InvalidArgument for a malformed id, or when no live sandbox has it.
    std::shared_ptr<Sandbox> open(const std::string& id);
    // Destroys every sandbox of a conversation; returns how many.
    int purge(const std::string& scope, const std::string& thread_id);

    const std::filesystem::path& state_dir() const noexcept;

    // Blocks until no pool refill is in flight (benchmarks and tests measuring a full pool).
    void wait_for_pool() const;

    // (perf) The shared pool, `maf-sandbox pool`: pre-built sandboxes that outlive this backend and
    // serve every process of the state directory (the CLI's one-shot `run` takes one instead of
    // launching). The signature of closed-egress sandboxes of `image` in the default work
    // directory with this backend's limits.
    std::string pool_signature(const std::string& image) const;
    // Creates such sandboxes until `size` live ones are pooled, one filler per
    // signature at a time across processes (another filler at work: returns 0 at once). Returns
    // how many it made. Throws what acquire throws for a create (an unknown image, a limit this
    // host cannot enforce).
    std::size_t fill_shared_pool(std::size_t size, const std::string& image);
    // Destroys every pooled sandbox of this state directory nobody has taken; returns how many.
    std::size_t drain_shared_pool();

  private:
    struct Impl;
    std::shared_ptr<Impl> impl_;
};

}  // namespace maf_sandbox::local
