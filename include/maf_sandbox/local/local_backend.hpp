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

namespace maf_sandbox::local {

struct LocalBackendConfig {
    std::filesystem::path state_dir;  // empty: MAF_SANDBOX_STATE_DIR or /var/lib/maf-sandbox
    std::string default_image = "host";
    std::uint64_t memory_bytes = 1ull << 30;
    std::uint64_t pids = 512;
    double cpus = 1.0;
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
    // and kind across threads and processes. Throws SandboxEgressNotEnforced for any egress but
    // closed, InvalidArgument for an unknown image, SandboxCapabilityNotSupported when a limit
    // cannot be enforced on this host; nothing is left behind on failure.
    Task<std::shared_ptr<Sandbox>> acquire(SandboxKey key, SandboxSpec spec) override;
    Task<std::optional<DisposalFailure>> dispose(SandboxKey key,
                                                 std::optional<std::string> kind) override;
    Task<ScopePurge> dispose_scope(std::string scope, std::string thread_id) override;
    Task<void> close() override;

    // For the CLI, synchronous. `selector` items are `k=v` (InvalidArgument when malformed).
    std::vector<LocalSandboxInfo> list(const std::vector<std::string>& selector) const;
    // Destroys one sandbox by id; false when there is none.
    bool remove(const std::string& id);
    // Destroys every sandbox of a conversation; returns how many.
    int purge(const std::string& scope, const std::string& thread_id);

    const std::filesystem::path& state_dir() const noexcept;

  private:
    struct Impl;
    std::shared_ptr<Impl> impl_;
};

}  // namespace maf_sandbox::local
