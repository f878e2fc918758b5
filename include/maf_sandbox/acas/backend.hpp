// AcasBackend: the protocol's SandboxBackend over the ACAS data plane (the maf-sandbox-acas
// 0.25.0 README, in C++). It declares microvm against the real service; in emulator mode it
// declares the rung the acas-emulator names in its x-acas-emulator header (and refuses that header
// when emulator mode is off), so the router's floor stays honest.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "maf_sandbox/acas/client.hpp"
#include "maf_sandbox/acas/config.hpp"
#include "maf_sandbox/acas/errors.hpp"
#include "maf_sandbox/core/sandbox.hpp"

namespace maf_sandbox::acas {

inline constexpr std::string_view kBackendName = "acas";

class AcasBackend : public SandboxBackend {
  public:
    // Validates the config and logs the one-time preview warning unless silenced. Does no I/O.
    explicit AcasBackend(AcasSandboxConfig config);
    ~AcasBackend() override;

    std::string name() const override { return std::string(kBackendName); }
    // microvm; in emulator mode the rung the emulator named, or `none` until discover() (or any
    // answer) has seen it.
    Isolation isolation() const override;
    BackendDeclarations declarations() const override;

    // One catalogue request that learns the emulator's rung (and, off emulator mode, proves the
    // endpoint is not an emulator). Call it before handing the backend to a router in emulator
    // mode. A credential resolver is asked as `acquire` with an empty scope and thread.
    Task<void> discover();

    Task<std::shared_ptr<Sandbox>> acquire(SandboxKey key, SandboxSpec spec) override;
    Task<std::optional<DisposalFailure>> dispose(SandboxKey key,
                                                 std::optional<std::string> kind) override;
    Task<ScopePurge> dispose_scope(std::string scope, std::string thread_id) override;
    // Permanently refuses new work, drains running operations (bounded by client_close), then
    // closes every client on its own io_context and waits for each close (bounded by
    // client_close again); never touches a sandbox. Throws AcasClientCloseError when work was
    // still running at the first bound, or a client's close failed or had not run at the second
    // (its io_context was not running): keep the owning io_contexts running until it returns.
    Task<void> close() override;

    // --- Operator commands (the CLI's ls, rm and images) -----------------------------------
    // They resolve credentials as `dispose_scope` with an empty scope and thread (a host resolver
    // that only grants trusted conversations refuses them, which is the point: they are for an
    // operator's own identity).

    // Every sandbox of the group carrying all `labels` (an empty map lists the whole group).
    Task<std::vector<SandboxInfo>> list_sandboxes(std::map<std::string, std::string> labels);
    // Deletes one sandbox by id and waits until the service no longer has it; false when it was
    // already gone. Throws what the service answered otherwise.
    Task<bool> remove_sandbox(std::string id);

    struct Images {
        std::vector<std::string> prebuilt;    // the service's catalogue, sorted
        std::vector<DiskImageInfo> imported;  // the group's disk images
    };
    Task<Images> list_images();

    struct ImportedImage {
        DiskImageInfo image;
        bool already_imported = false;  // a disk image built from the same reference existed
    };
    // The README's import_disk_image script: `image` is repo:tag, qualified by the configured
    // registry; idempotent (an existing Ready disk image of the same reference is returned);
    // otherwise creates one (named `name`, default the last path segment with ':' and '@' turned
    // into '-', at most 60 characters) and polls it until Ready. Throws InvalidArgument for a
    // bare catalogue name (nothing to import), AcasServiceError when the import fails, Timeout
    // after `timeout`.
    Task<ImportedImage> import_disk_image(std::string image, std::string name = {},
                                          Seconds timeout = Seconds{600.0});

    // The service id of the key's sandbox of `kind` held by this backend, if any (for tests and
    // the CLI's listing).
    std::optional<std::string> held_sandbox_id(const SandboxKey& key,
                                               const std::string& kind) const;
    // HTTP requests sent by this backend's clients so far (benchmarks, tests).
    std::size_t requests_sent() const;
    // Clients currently open in the pool, over every io_context (tests of eviction).
    std::size_t open_clients() const;

    struct State;

  private:
    std::shared_ptr<State> state_;
};

}  // namespace maf_sandbox::acas
