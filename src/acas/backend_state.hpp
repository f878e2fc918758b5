// AcasBackend's shared state: held sandboxes, retained deletions, the per-key acquire locks, the
// scope-purge barrier, the client pool, and the AcasSandbox handed to callers. Sandboxes keep a
// shared_ptr to this state, so a handle outliving the backend object still works until close().
#pragma once

#include <atomic>
#include <boost/asio/any_io_executor.hpp>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "async_mutex.hpp"
#include "maf_sandbox/acas/backend.hpp"
#include "maf_sandbox/acas/client.hpp"
#include "maf_sandbox/core/confined_sandbox.hpp"
#include "maf_sandbox/core/paths.hpp"

namespace spdlog {
class logger;
}

namespace maf_sandbox::acas {

// The egress a sandbox was created with: mode and the case-folded host set (order ignored).
struct EgressRecord {
    Egress mode = Egress::closed;
    std::set<std::string> hosts;
    bool operator==(const EgressRecord&) const = default;
};
EgressRecord egress_of(const SandboxSpec& spec);
EgressRecord egress_of(const SandboxInfo& info);
std::string describe(const EgressRecord& record);

struct Binding {
    std::string authority;
    std::string generation;
    std::function<std::shared_ptr<azure::TokenCredential>(boost::asio::any_io_executor)> factory;
};

using SlotKey = std::pair<SandboxKey, std::string>;  // (key, kind)

struct HeldSandbox {
    std::string id;
    SandboxKey key;
    std::string kind;
    std::string base;
    // The create source ("prebuilt:<name>" or "disk:<id>") the image hint is keyed by; empty for
    // a sandbox adopted from the service (its image is unknown, so it sets no hint).
    std::string image;
    EgressRecord egress;
    Binding binding;
    std::atomic<bool> invalidated{false};
    // Set when acquire returned it: only then can a caller have left state in it, so only then
    // does its invalidation make the key's next acquire report a replacement.
    std::atomic<bool> handed_out{false};
    // Probe results cached with the sandbox; failures are not cached (the next acquire retries).
    std::mutex probe_mutex;
    bool capture_ok = false;
    bool host_tools_ok = false;
    bool removal_probed = false;
    std::optional<bool> removal_verdict;
};

class ClientLease;

struct AcasBackend::State : std::enable_shared_from_this<AcasBackend::State> {
    explicit State(AcasSandboxConfig config);

    AcasSandboxConfig config;
    bool emulator = false;
    std::shared_ptr<spdlog::logger> log;

    mutable std::mutex mutex;
    std::map<SlotKey, std::shared_ptr<HeldSandbox>> held;
    std::map<SlotKey, std::set<std::string>> retained;
    // Sandboxes discarded after a caller used them (an exec whose outcome is unknown, a failed
    // capture): the key's next acquire in this process reports it on the sandbox it returns.
    std::map<SlotKey, SandboxReplacement> replaced;
    std::map<SlotKey, std::shared_ptr<detail::AsyncMutex>> locks;
    std::map<std::pair<std::string, std::string>, int> acquiring;
    std::map<std::pair<std::string, std::string>, int> purging;
    std::optional<Isolation> rung;
    std::set<std::string> prebuilt_cache;
    std::map<std::string, std::string> disk_image_cache;

    // The image-level hint of the removal probe (README: "an image-level hint can refuse before a
    // create for 60 seconds from its completed probe"). Only a completed probe writes it, and only
    // when it started after the probe that wrote the current entry (generation order), so a
    // refusal served from the hint never extends it.
    struct ImageHint {
        SteadyClock::time_point expires;
        std::uint64_t generation = 0;
        bool refused = false;
    };
    std::map<std::string, ImageHint> image_hints;
    std::uint64_t probe_generation = 0;
    // The live refusal for `image`, if any (an expired one is dropped).
    bool image_hint_refuses(const std::string& image);
    void record_image_verdict(const std::string& image, std::uint64_t generation, bool refused);
    bool closed = false;
    int active = 0;

    struct PoolEntry {
        boost::asio::any_io_executor executor;
        const void* context = nullptr;
        std::string authority;
        std::string generation;
        std::shared_ptr<azure::TokenCredential> credential;
        std::shared_ptr<AcasClient> client;
        int leases = 0;
        SteadyClock::time_point last_used;
    };
    std::vector<std::shared_ptr<PoolEntry>> pool;
    std::size_t requests_of_closed_clients = 0;

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
    // A client for `binding` on the calling coroutine's io_context.
    Task<ClientLease> lease(const Binding& binding);
    std::shared_ptr<detail::AsyncMutex> lock_for(const SlotKey& slot);
    void observe(const AcasClient& client);

    // DELETE then poll until 404, bounded by `budget`; nullopt on success.
    Task<std::optional<DisposalFailure>> delete_and_wait(AcasClient& client, std::string id,
                                                         Seconds budget);
    // Marks the sandbox unusable, forgets it and deletes it (retaining the id on failure).
    Task<void> invalidate(std::shared_ptr<HeldSandbox> sandbox, std::string reason);
    // Marks it now and deletes it on `executor` without making the caller wait (a timed-out exec
    // must report its timeout on time).
    void invalidate_in_background(std::shared_ptr<HeldSandbox> sandbox, std::string reason,
                                  boost::asio::any_io_executor executor);
    bool mark_invalid(const std::shared_ptr<HeldSandbox>& sandbox, const std::string& reason);
    Task<void> dispose_invalidated(std::shared_ptr<HeldSandbox> sandbox);
};

class ClientLease {
  public:
    ClientLease() = default;
    ClientLease(std::shared_ptr<AcasBackend::State> state,
                std::shared_ptr<AcasBackend::State::PoolEntry> entry);
    ClientLease(ClientLease&& other) noexcept;
    ClientLease& operator=(ClientLease&& other) noexcept;
    ~ClientLease();
    AcasClient& client() const { return *entry_->client; }
    AcasClient* operator->() const { return entry_->client.get(); }

  private:
    void release();
    std::shared_ptr<AcasBackend::State> state_;
    std::shared_ptr<AcasBackend::State::PoolEntry> entry_;
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
