#include "backend_state.hpp"

#include <fmt/format.h>
#include <spdlog/logger.h>
#include <spdlog/sinks/null_sink.h>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/execution/context.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/query.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <cctype>
#include <optional>

#include "maf_sandbox/acas/errors.hpp"
#include "maf_sandbox/net/http.hpp"
#include "replacement_notice.hpp"

namespace maf_sandbox::acas {

namespace asio = boost::asio;

namespace {
std::string lower(std::string text) {
    for (auto& c : text)
        c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return text;
}
}  // namespace

EgressRecord egress_of(const SandboxSpec& spec) {
    EgressRecord record;
    record.mode = spec->egress;
    for (const auto& host : spec->egress_allow)
        record.hosts.insert(lower(host));
    if (record.mode == Egress::allowlist && record.hosts.empty())
        record.mode = Egress::closed;
    return record;
}

EgressRecord egress_of(const SandboxInfo& info) {
    EgressRecord record;
    if (net::iequals(info.egress_default_action, "Allow")) {
        record.mode = Egress::unrestricted;
        return record;
    }
    for (const auto& host : info.egress_hosts)
        record.hosts.insert(lower(host));
    record.mode = record.hosts.empty() ? Egress::closed : Egress::allowlist;
    return record;
}

std::string describe(const EgressRecord& record) {
    std::string hosts;
    for (const auto& host : record.hosts)
        hosts += (hosts.empty() ? "" : ", ") + host;
    return fmt::format("{}{}{}{}", to_string(record.mode), hosts.empty() ? "" : " [", hosts,
                       hosts.empty() ? "" : "]");
}

AcasBackend::State::State(AcasSandboxConfig c) : config(std::move(c)) {
    config.validate();
    emulator = config.emulator_mode();
    log = config.log ? config.log
                     : std::make_shared<spdlog::logger>(
                           "acas", std::make_shared<spdlog::sinks::null_sink_mt>());
}

AcasBackend::State::Operation::Operation(std::shared_ptr<State> state) : state_(std::move(state)) {
    std::lock_guard lock(state_->mutex);
    if (state_->closed) {
        throw AcasBackendClosed(
            "this ACAS backend was closed and refuses new work; create a new backend");
    }
    ++state_->active;
}

AcasBackend::State::Operation::~Operation() {
    std::lock_guard lock(state_->mutex);
    --state_->active;
}

namespace {
// The resolver's answer or its failure, as a value: `||` below waits for the first operation to
// *succeed*, so a resolver that throws at once must not leave it waiting out client_wait.
struct ResolverOutcome {
    std::optional<AcasCredentialBinding> binding;
    std::exception_ptr failure;
};

Task<ResolverOutcome> ask(const AcasCredentialResolver& resolver, AcasCredentialRequest request) {
    std::exception_ptr failure;
    try {
        auto binding = co_await resolver(std::move(request));
        co_return ResolverOutcome{std::move(binding), nullptr};
    } catch (...) {
        failure = std::current_exception();
    }
    co_return ResolverOutcome{std::nullopt, failure};
}
}  // namespace

Task<Binding> AcasBackend::State::resolve(AcasCredentialRequest request) {
    if (!config.credential_resolver) {
        Binding binding{"default", "0", {}};
        if (config.token) {
            auto credential = azure::make_static_token_credential(*config.token);
            binding.authority = "static";
            binding.factory = [credential](asio::any_io_executor) { return credential; };
        } else {
            auto options = config.credential_options;
            binding.factory = [options](asio::any_io_executor executor) {
                return azure::make_default_azure_credential(std::move(executor), options);
            };
        }
        co_return binding;
    }
    auto executor = co_await asio::this_coro::executor;
    asio::steady_timer bound(executor);
    bound.expires_after(std::chrono::duration_cast<SteadyClock::duration>(config.client_wait));
    AcasCredentialBinding answer;
    try {
        using namespace asio::experimental::awaitable_operators;
        auto asked = ask(config.credential_resolver, std::move(request));
        auto waited = bound.async_wait(asio::use_awaitable);
        auto outcome = co_await (std::move(asked) || std::move(waited));
        if (outcome.index() == 1) {
            throw AcasCredentialError(
                "the host's credential resolver did not answer within client_wait_seconds; no "
                "fallback to the default identity is made");
        }
        auto resolved = std::get<0>(std::move(outcome));
        if (resolved.failure)
            std::rethrow_exception(resolved.failure);
        answer = std::move(*resolved.binding);
    } catch (const AcasCredentialError&) {
        throw;
    } catch (const boost::system::system_error&) {
        throw;
    } catch (const std::exception& e) {
        log->warn("the credential resolver failed: {}", e.what());
        throw AcasCredentialError(
            "the host's credential resolver failed; no fallback to the default identity is made "
            "(see the host log)");
    }
    if (answer.authority.empty() || answer.generation.empty() || !answer.create_credential) {
        throw AcasCredentialError(
            "the credential resolver returned a binding without authority, generation or factory");
    }
    co_return Binding{answer.authority, answer.generation, answer.create_credential};
}

Task<ClientLease> AcasBackend::State::lease(const Binding& binding) {
    auto executor = co_await asio::this_coro::executor;
    const void* context = &asio::query(executor, asio::execution::context);
    const auto give_up = deadline_after(config.client_wait);
    asio::steady_timer pause(executor);
    for (;;) {
        {
            std::lock_guard lock(mutex);
            if (closed) {
                throw AcasBackendClosed(
                    "this ACAS backend was closed and refuses new work; create a new backend");
            }
            // Time-based idle eviction, on this io_context only (a client is closed where it
            // lives). It closes clients; sandboxes and held handles are untouched.
            const auto now = SteadyClock::now();
            const auto idle_for =
                std::chrono::duration_cast<SteadyClock::duration>(config.client_idle);
            std::erase_if(pool, [&](const std::shared_ptr<PoolEntry>& entry) {
                if (entry->context != context || entry->leases > 0 ||
                    now - entry->last_used < idle_for) {
                    return false;
                }
                requests_of_closed_clients += entry->client->stats().requests;
                entry->client->close();
                return true;
            });
            std::shared_ptr<PoolEntry> idle_oldest;
            std::size_t on_loop = 0;
            for (const auto& entry : pool) {
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
            if (on_loop >= config.max_clients_per_loop && idle_oldest) {
                // Idle eviction closes a client; it never touches sandboxes or held handles.
                requests_of_closed_clients += idle_oldest->client->stats().requests;
                idle_oldest->client->close();
                std::erase(pool, idle_oldest);
                --on_loop;
            }
            if (on_loop < config.max_clients_per_loop) {
                auto entry = std::make_shared<PoolEntry>();
                entry->executor = executor;
                entry->context = context;
                entry->authority = binding.authority;
                entry->generation = binding.generation;
                entry->credential = binding.factory(executor);
                if (!entry->credential) {
                    throw AcasCredentialError("the credential factory returned no credential");
                }
                AcasClientOptions options;
                options.endpoint = config.endpoint;
                options.subscription_id = config.subscription_id;
                options.resource_group = config.resource_group;
                options.sandbox_group = config.sandbox_group;
                options.ca_file = config.ca_file;
                options.credential = entry->credential;
                options.emulator = emulator;
                options.retry = config.retry;
                options.log = log;
                entry->client = std::make_shared<AcasClient>(executor, std::move(options));
                entry->leases = 1;
                entry->last_used = SteadyClock::now();
                pool.push_back(entry);
                co_return ClientLease(shared_from_this(), entry);
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

bool AcasBackend::State::image_hint_refuses(const std::string& image) {
    std::lock_guard lock(mutex);
    const auto found = image_hints.find(image);
    if (found == image_hints.end())
        return false;
    if (SteadyClock::now() >= found->second.expires) {
        image_hints.erase(found);
        return false;
    }
    return found->second.refused;
}

void AcasBackend::State::record_image_verdict(const std::string& image, std::uint64_t generation,
                                              bool refused) {
    if (image.empty())
        return;
    std::lock_guard lock(mutex);
    const auto found = image_hints.find(image);
    if (found != image_hints.end() && found->second.generation > generation)
        return;  // a probe that started later already answered
    const auto ttl = std::chrono::duration_cast<SteadyClock::duration>(config.image_hint);
    image_hints[image] = ImageHint{SteadyClock::now() + ttl, generation, refused};
}

std::shared_ptr<detail::AsyncMutex> AcasBackend::State::lock_for(const SlotKey& slot) {
    std::lock_guard lock(mutex);
    auto& entry = locks[slot];
    if (!entry)
        entry = std::make_shared<detail::AsyncMutex>();
    return entry;
}

void AcasBackend::State::observe(const AcasClient& client) {
    if (const auto seen = client.emulator_rung()) {
        std::lock_guard lock(mutex);
        rung = seen;
    }
}

Task<std::optional<DisposalFailure>> AcasBackend::State::delete_and_wait(AcasClient& client,
                                                                         std::string id,
                                                                         Seconds budget) {
    const auto deadline = deadline_after(budget);
    try {
        const bool deleted = co_await client.delete_sandbox(id, deadline);
        if (deleted) {
            co_await client.wait_until_deleted(id, config.poll_interval, deadline);
        }
        log->info("sandbox deleted: {}", id);
        co_return std::nullopt;
    } catch (const Timeout& e) {
        log->warn("deleting sandbox {} timed out: {}", id, e.what());
        co_return DisposalFailure{DisposalCode::timeout,
                                  fmt::format("sandbox {}: {}", id, e.what())};
    } catch (const AcasServiceUnreachable& e) {
        log->warn("deleting sandbox {} failed: {}", id, e.what());
        co_return DisposalFailure{DisposalCode::unreachable,
                                  fmt::format("sandbox {}: {}", id, e.what())};
    } catch (const net::NetError& e) {
        co_return DisposalFailure{DisposalCode::unreachable,
                                  fmt::format("sandbox {}: {}", id, e.what())};
    } catch (const boost::system::system_error&) {
        throw;
    } catch (const std::exception& e) {
        log->warn("deleting sandbox {} was refused: {}", id, e.what());
        co_return DisposalFailure{DisposalCode::refused,
                                  fmt::format("sandbox {}: {}", id, e.what())};
    }
}

bool AcasBackend::State::mark_invalid(const std::shared_ptr<HeldSandbox>& sandbox,
                                      const std::string& reason) {
    if (sandbox->invalidated.exchange(true)) {
        return false;  // someone else is already disposing it
    }
    const SlotKey slot{sandbox->key, sandbox->kind};
    std::lock_guard lock(mutex);
    if (auto found = held.find(slot); found != held.end() && found->second == sandbox) {
        held.erase(found);
    }
    // Retained until the deletion succeeds: acquire for this key and kind waits for it.
    retained[slot].insert(sandbox->id);
    if (sandbox->handed_out) {
        replaced[slot] = SandboxReplacement{
            sandbox->id, fmt::format("the backend discarded sandbox {} ({}); its files and "
                                     "processes are gone",
                                     sandbox->id, reason)};
    }
    log->warn("sandbox {} invalidated ({}); disposing it", sandbox->id, reason);
    return true;
}

void AcasBackend::State::invalidate_in_background(std::shared_ptr<HeldSandbox> sandbox,
                                                  std::string reason,
                                                  boost::asio::any_io_executor executor) {
    if (!mark_invalid(sandbox, reason))
        return;
    asio::co_spawn(
        executor,
        [self = shared_from_this(), sandbox]() -> Task<void> {
            co_await self->dispose_invalidated(sandbox);
        },
        asio::detached);
}

Task<void> AcasBackend::State::invalidate(std::shared_ptr<HeldSandbox> sandbox,
                                          std::string reason) {
    if (!mark_invalid(sandbox, reason))
        co_return;
    co_await dispose_invalidated(std::move(sandbox));
}

Task<void> AcasBackend::State::dispose_invalidated(std::shared_ptr<HeldSandbox> sandbox) {
    const SlotKey slot{sandbox->key, sandbox->kind};
    co_await asio::this_coro::reset_cancellation_state();
    std::optional<DisposalFailure> failure;
    try {
        auto lease_ = co_await lease(sandbox->binding);
        co_await replacement_notice::leave(*this, lease_.client(), *sandbox);
        failure = co_await delete_and_wait(lease_.client(), sandbox->id,
                                           std::min(Seconds{30.0}, config.read_timeout));
    } catch (const std::exception& e) {
        failure = DisposalFailure{DisposalCode::unreachable, e.what()};
    }
    if (!failure) {
        std::lock_guard lock(mutex);
        if (auto found = retained.find(slot); found != retained.end()) {
            found->second.erase(sandbox->id);
            if (found->second.empty())
                retained.erase(found);
        }
    } else {
        log->warn(
            "sandbox {} could not be disposed after invalidation; the next acquire retries: {}",
            sandbox->id, failure->detail);
    }
}

ClientLease::ClientLease(std::shared_ptr<AcasBackend::State> state,
                         std::shared_ptr<AcasBackend::State::PoolEntry> entry)
    : state_(std::move(state)), entry_(std::move(entry)) {}

ClientLease::ClientLease(ClientLease&& other) noexcept
    : state_(std::move(other.state_)), entry_(std::move(other.entry_)) {}

ClientLease& ClientLease::operator=(ClientLease&& other) noexcept {
    release();
    state_ = std::move(other.state_);
    entry_ = std::move(other.entry_);
    return *this;
}

ClientLease::~ClientLease() {
    release();
}

void ClientLease::release() {
    if (!entry_)
        return;
    state_->observe(*entry_->client);
    std::lock_guard lock(state_->mutex);
    --entry_->leases;
    entry_->last_used = SteadyClock::now();
    entry_.reset();
    state_.reset();
}

}  // namespace maf_sandbox::acas
