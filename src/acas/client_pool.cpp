#include "client_pool.hpp"

#include <boost/asio/execution/context.hpp>
#include <boost/asio/query.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "maf_sandbox/acas/errors.hpp"

namespace maf_sandbox::acas {

namespace asio = boost::asio;

ClientPool::ClientPool(AcasClientOptions options, ClientPoolLimits limits)
    : options_(std::move(options)), limits_(limits) {}

void ClientPool::retire(Entry& entry) {
    requests_of_closed_clients_ += entry.client->stats().requests;
    entry.client->close();
}

std::shared_ptr<ClientPool::Entry> ClientPool::open(const Binding& binding,
                                                    asio::any_io_executor executor,
                                                    const void* context) {
    auto entry = std::make_shared<Entry>();
    entry->executor = executor;
    entry->context = context;
    entry->authority = binding.authority;
    entry->generation = binding.generation;
    entry->credential = binding.factory(executor);
    if (!entry->credential) {
        throw AcasCredentialError("the credential factory returned no credential");
    }
    auto options = options_;
    options.credential = entry->credential;
    entry->client = std::make_shared<AcasClient>(executor, std::move(options));
    entry->leases = 1;
    entry->last_used = SteadyClock::now();
    return entry;
}

Task<ClientLease> ClientPool::lease(const Binding& binding) {
    auto executor = co_await asio::this_coro::executor;
    const void* context = &asio::query(executor, asio::execution::context);
    const auto give_up =
        SteadyClock::now() + std::chrono::duration_cast<SteadyClock::duration>(limits_.wait);
    const auto idle_for = std::chrono::duration_cast<SteadyClock::duration>(limits_.idle);
    asio::steady_timer pause(executor);
    for (;;) {
        {
            std::lock_guard lock(mutex_);
            if (stopped_) {
                throw AcasBackendClosed(
                    "this ACAS backend was closed and refuses new work; create a new backend");
            }
            // Time-based idle eviction, on this io_context only (a client is closed where it
            // lives).
            const auto now = SteadyClock::now();
            std::erase_if(entries_, [&](const std::shared_ptr<Entry>& entry) {
                if (entry->context != context || entry->leases > 0 ||
                    now - entry->last_used < idle_for) {
                    return false;
                }
                retire(*entry);
                return true;
            });
            std::shared_ptr<Entry> idle_oldest;
            std::size_t on_loop = 0;
            for (const auto& entry : entries_) {
                if (entry->context != context)
                    continue;
                ++on_loop;
                if (entry->authority == binding.authority &&
                    entry->generation == binding.generation) {
                    ++entry->leases;
                    entry->last_used = SteadyClock::now();
                    co_return ClientLease(shared_from_this(), entry);
                }
                if (entry->leases == 0 &&
                    (!idle_oldest || entry->last_used < idle_oldest->last_used)) {
                    idle_oldest = entry;
                }
            }
            if (on_loop >= limits_.max_per_loop && idle_oldest) {
                retire(*idle_oldest);
                std::erase(entries_, idle_oldest);
                --on_loop;
            }
            if (on_loop < limits_.max_per_loop) {
                auto entry = open(binding, executor, context);
                entries_.push_back(entry);
                co_return ClientLease(shared_from_this(), std::move(entry));
            }
        }
        if (SteadyClock::now() >= give_up) {
            throw AcasCredentialError(
                "no ACAS client became free within client_wait_seconds (max_clients_per_loop "
                "reached); raise the limit or lower concurrency");
        }
        pause.expires_after(std::chrono::milliseconds(20));
        co_await pause.async_wait(asio::use_awaitable);
    }
}

void ClientPool::close_idle_on(const void* context) {
    std::lock_guard lock(mutex_);
    std::erase_if(entries_, [&](const std::shared_ptr<Entry>& entry) {
        if (entry->context != context || entry->leases > 0)
            return false;
        retire(*entry);
        return true;
    });
}

std::vector<std::shared_ptr<ClientPool::Entry>> ClientPool::stop() {
    std::lock_guard lock(mutex_);
    stopped_ = true;
    for (const auto& entry : entries_)
        requests_of_closed_clients_ += entry->client->stats().requests;
    std::vector<std::shared_ptr<Entry>> out;
    out.swap(entries_);
    return out;
}

std::size_t ClientPool::requests_sent() const {
    std::lock_guard lock(mutex_);
    std::size_t total = requests_of_closed_clients_;
    for (const auto& entry : entries_)
        total += entry->client->stats().requests;
    return total;
}

std::size_t ClientPool::open_clients() const {
    std::lock_guard lock(mutex_);
    return entries_.size();
}

std::optional<Isolation> ClientPool::rung() const {
    std::lock_guard lock(mutex_);
    return rung_;
}

void ClientPool::release(Entry& entry) {
    const auto seen = entry.client->emulator_rung();
    std::lock_guard lock(mutex_);
    if (seen)
        rung_ = seen;
    --entry.leases;
    entry.last_used = SteadyClock::now();
}

ClientLease::ClientLease(std::shared_ptr<ClientPool> pool, std::shared_ptr<ClientPool::Entry> entry)
    : pool_(std::move(pool)), entry_(std::move(entry)) {}

ClientLease::ClientLease(ClientLease&& other) noexcept
    : pool_(std::move(other.pool_)), entry_(std::move(other.entry_)) {}

ClientLease& ClientLease::operator=(ClientLease&& other) noexcept {
    release();
    pool_ = std::move(other.pool_);
    entry_ = std::move(other.entry_);
    return *this;
}

ClientLease::~ClientLease() {
    release();
}

void ClientLease::release() {
    if (!entry_)
        return;
    pool_->release(*entry_);
    entry_.reset();
    pool_.reset();
}

}  // namespace maf_sandbox::acas
