// AcasBackend's shared state, in three parts with their own locks and invariants: the slot table
// (key -> sandbox, owed deletions, acquire admission), the image catalogue and the client pool;
// plus the config, the log and the backend's lifecycle (open, then closed for good). Sandboxes keep
// a shared_ptr to this state, so a handle outliving the backend object still works until close().
#pragma once

#include <boost/asio/any_io_executor.hpp>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "client_pool.hpp"
#include "held_sandbox.hpp"
#include "image_catalogue.hpp"
#include "maf_sandbox/acas/backend.hpp"
#include "maf_sandbox/acas/client.hpp"
#include "maf_sandbox/core/confined_sandbox.hpp"
#include "maf_sandbox/core/labels.hpp"
#include "maf_sandbox/core/paths.hpp"
#include "slot_table.hpp"

namespace spdlog {
class logger;
}

namespace maf_sandbox::acas {

// Open until close(), then closed for good; counts the operations close() drains. Its own mutex.
class Lifecycle {
  public:
    // Throws AcasBackendClosed once closed.
    void enter();
    void leave();
    void close();
    bool closed() const;
    int active() const;

  private:
    mutable std::mutex mutex_;
    bool closed_ = false;
    int active_ = 0;
};

struct AcasBackend::State : std::enable_shared_from_this<AcasBackend::State> {
    explicit State(AcasSandboxConfig config);

    AcasSandboxConfig config;
    bool emulator = false;
    std::shared_ptr<spdlog::logger> log;

    Lifecycle lifecycle;
    SlotTable slots;
    ImageCatalogue images;
    std::shared_ptr<ClientPool> pool;

    // Counts a running operation for close(); throws AcasBackendClosed after close().
    class Operation {
      public:
        explicit Operation(std::shared_ptr<State> state);
        ~Operation();
        Operation(const Operation&) = delete;
        Operation& operator=(const Operation&) = delete;

      private:
        std::shared_ptr<State> state_;
    };

    Task<Binding> resolve(AcasCredentialRequest request);
    // A client for `binding` on the calling coroutine's io_context; refused once closed.
    Task<ClientLease> lease(const Binding& binding);

    // DELETE then poll until 404, bounded by `budget`; nullopt on success.
    Task<std::optional<DisposalFailure>> delete_and_wait(AcasClient& client, std::string id,
                                                         Seconds budget);
    // Marks the sandbox unusable, forgets it and deletes it (its deletion owed on failure).
    Task<void> invalidate(std::shared_ptr<HeldSandbox> sandbox, std::string reason);
    // Marks it now and deletes it on `executor` without making the caller wait (a timed-out exec
    // must report its timeout on time).
    void invalidate_in_background(std::shared_ptr<HeldSandbox> sandbox, std::string reason,
                                  boost::asio::any_io_executor executor);
    bool mark_invalid(const std::shared_ptr<HeldSandbox>& sandbox, const std::string& reason);
    Task<void> dispose_invalidated(std::shared_ptr<HeldSandbox> sandbox);
};

// The file methods are ConfinedSandbox's, over AcasFileOps (sandbox.cpp).
class AcasSandbox : public ConfinedSandbox {
  public:
    AcasSandbox(std::shared_ptr<AcasBackend::State> state, std::shared_ptr<HeldSandbox> held);

    std::string base_directory() const override;
    Task<ExecResult> exec(ExecRequest request) override;
    Task<ExecResult> run_code(std::string code, Seconds timeout) override;
    Task<void> reclaim(std::string directory, std::string working_directory,
                       Seconds timeout) override;

    const std::string& id() const { return held_->id; }
    // The unconfined, no-follow stat the ancestor walk runs on (absolute path).
    Task<std::optional<SandboxEntry>> raw_stat(std::string absolute_path, Deadline deadline);

  protected:
    Task<void> with_file_ops(FileWork work) override;

  private:
    void require_usable() const;

    std::shared_ptr<AcasBackend::State> state_;
    std::shared_ptr<HeldSandbox> held_;
};

}  // namespace maf_sandbox::acas
