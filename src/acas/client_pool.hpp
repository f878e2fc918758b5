// The client pool: the AcasClients this backend's operations lease, one per (io_context,
// credential binding), and what those clients observed (the emulator's rung, requests sent).
//
// One mutex guards it, each step one critical section, so these hold whenever it is free:
// - A client lives on one io_context: it is leased only to coroutines running there and closed
//   there (close() posts the close to its loop).
// - A loop has at most max_per_loop clients. A leased client is never evicted; eviction (idle for
//   `idle`, or the oldest idle one when the loop is full) closes the client and touches no sandbox.
// - requests_sent() never goes back: a client's requests are counted into the closed total before
//   it leaves the pool.
// - After stop() no lease is given, and the pool holds no client.
#pragma once

#include <boost/asio/any_io_executor.hpp>
#include <cstddef>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "held_sandbox.hpp"
#include "maf_sandbox/acas/client.hpp"

namespace maf_sandbox::acas {

struct ClientPoolLimits {
    std::size_t max_per_loop = 32;
    Seconds idle{300.0};
    // How long a lease waits for a client to free on a full loop.
    Seconds wait{30.0};
};

class ClientLease;

class ClientPool : public std::enable_shared_from_this<ClientPool> {
  public:
    struct Entry {
        boost::asio::any_io_executor executor;
        const void* context = nullptr;
        std::string authority;
        std::string generation;
        std::shared_ptr<azure::TokenCredential> credential;
        std::shared_ptr<AcasClient> client;
        int leases = 0;
        SteadyClock::time_point last_used;
    };

    // `options` is every client's (endpoint, group, TLS, retry, log) but the credential, which
    // each binding's factory makes.
    ClientPool(AcasClientOptions options, ClientPoolLimits limits);

    // A client for `binding` on the calling coroutine's io_context: the one it has, a new one, or
    // (loop full) one after evicting the oldest idle client. Waits up to limits.wait for a leased
    // one to free, then throws AcasCredentialError; AcasBackendClosed after stop().
    Task<ClientLease> lease(const Binding& binding);

    // Closes the idle clients of one io_context (one that is about to end).
    void close_idle_on(const void* context);
    // Refuses every later lease and hands over every client for its closing.
    std::vector<std::shared_ptr<Entry>> stop();

    std::size_t requests_sent() const;
    std::size_t open_clients() const;
    // The rung an emulator named in any answer a leased client saw.
    std::optional<Isolation> rung() const;

  private:
    friend class ClientLease;
    void release(Entry& entry);
    // Closes `entry`'s client and counts its requests; the caller holds the mutex.
    void retire(Entry& entry);
    std::shared_ptr<Entry> open(const Binding& binding, boost::asio::any_io_executor executor,
                                const void* context);

    const AcasClientOptions options_;
    const ClientPoolLimits limits_;
    mutable std::mutex mutex_;
    std::vector<std::shared_ptr<Entry>> entries_;
    std::size_t requests_of_closed_clients_ = 0;
    std::optional<Isolation> rung_;
    bool stopped_ = false;
};

// One leased client; gives it back to the pool when destroyed.
class ClientLease {
  public:
    ClientLease() = default;
    ClientLease(std::shared_ptr<ClientPool> pool, std::shared_ptr<ClientPool::Entry> entry);
    ClientLease(ClientLease&& other) noexcept;
    ClientLease& operator=(ClientLease&& other) noexcept;
    ~ClientLease();
    AcasClient& client() const { return *entry_->client; }
    AcasClient* operator->() const { return entry_->client.get(); }

  private:
    void release();
    std::shared_ptr<ClientPool> pool_;
    std::shared_ptr<ClientPool::Entry> entry_;
};

}  // namespace maf_sandbox::acas
