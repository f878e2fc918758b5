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
#include "maf_sandbox/core/labels.hpp"
#include "maf_sandbox/net/http.hpp"
#include "replacement_notice.hpp"

namespace maf_sandbox::acas {

namespace asio = boost::asio;

namespace {
AcasSandboxConfig validated(AcasSandboxConfig config) {
    config.validate();
    return config;
}

std::shared_ptr<spdlog::logger> log_of(const AcasSandboxConfig& config) {
    return config.log ? config.log
                      : std::make_shared<spdlog::logger>(
                            "acas", std::make_shared<spdlog::sinks::null_sink_mt>());
}

std::shared_ptr<ClientPool> pool_of(const AcasSandboxConfig& config, bool emulator,
                                    std::shared_ptr<spdlog::logger> log) {
    AcasClientOptions options;
    options.endpoint = config.endpoint;
    options.subscription_id = config.subscription_id;
    options.resource_group = config.resource_group;
    options.sandbox_group = config.sandbox_group;
    options.ca_file = config.ca_file;
    options.emulator = emulator;
    options.retry = config.retry;
    options.log = std::move(log);
    return std::make_shared<ClientPool>(
        std::move(options),
        ClientPoolLimits{config.max_clients_per_loop, config.client_idle, config.client_wait});
}

[[noreturn]] void refuse_closed() {
    throw AcasBackendClosed(
        "this ACAS backend was closed and refuses new work; create a new backend");
}
}  // namespace

void Lifecycle::enter() {
    std::lock_guard lock(mutex_);
    if (closed_)
        refuse_closed();
    ++active_;
}

void Lifecycle::leave() {
    std::lock_guard lock(mutex_);
    --active_;
}

void Lifecycle::close() {
    std::lock_guard lock(mutex_);
    closed_ = true;
}

bool Lifecycle::closed() const {
    std::lock_guard lock(mutex_);
    return closed_;
}

int Lifecycle::active() const {
    std::lock_guard lock(mutex_);
    return active_;
}

AcasBackend::State::State(AcasSandboxConfig c)
    : config(validated(std::move(c))),
      emulator(config.emulator_mode()),
      log(log_of(config)),
      images(config.registry, config.image_hint),
      pool(pool_of(config, emulator, log)) {}

AcasBackend::State::Operation::Operation(std::shared_ptr<State> state) : state_(std::move(state)) {
    state_->lifecycle.enter();
}

AcasBackend::State::Operation::~Operation() {
    state_->lifecycle.leave();
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
    if (lifecycle.closed())
        refuse_closed();
    co_return co_await pool->lease(binding);
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
    // Owed until the deletion succeeds: acquire for this key and kind waits for it.
    if (!slots.invalidate(sandbox, reason))
        return false;  // someone else is already disposing it
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
    const auto slot = sandbox->slot();
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
        slots.settle(slot, sandbox->id);
    } else {
        log->warn(
            "sandbox {} could not be disposed after invalidation; the next acquire retries: {}",
            sandbox->id, failure->detail);
    }
}

}  // namespace maf_sandbox::acas
