// AcasBackend's construction, declarations, disposal (of a key, of a conversation) and close().
// acquire is in backend_acquire.cpp, the operator commands in backend_operator.cpp.
#include "maf_sandbox/acas/backend.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/logger.h>
#include <boost/asio/execution/context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/query.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <mutex>

#include "backend_state.hpp"
#include "maf_sandbox/core/labels.hpp"
#include "maf_sandbox/core/router.hpp"

namespace maf_sandbox::acas {

namespace asio = boost::asio;

AcasBackend::AcasBackend(AcasSandboxConfig config)
    : state_(std::make_shared<State>(std::move(config))) {
    if (!state_->config.silence_preview_warning) {
        state_->log->warn(
            "the ACAS backend targets Azure Container Apps Sandboxes, a preview service "
            "(api-version "
            "{}); its API may change or be removed without notice. Set silence_preview_warning "
            "once "
            "you have read this.",
            kApiVersion);
    }
}

AcasBackend::~AcasBackend() = default;

Isolation AcasBackend::isolation() const {
    if (!state_->emulator)
        return Isolation::microvm;
    // Until the emulator has named its rung, claim nothing.
    return state_->pool->rung().value_or(Isolation::none);
}

BackendDeclarations AcasBackend::declarations() const {
    BackendDeclarations d;
    d.capabilities = {Capability::exec,       Capability::files_in,     Capability::files_out,
                      Capability::files_list, Capability::files_delete, Capability::host_tools};
    d.limits = state_->config.limits;
    d.egress_modes = {Egress::allowlist, Egress::closed};
    d.os_families = {OsFamily::posix};
    d.isolation_scopes = {IsolationScope::conversation, IsolationScope::call};
    return d;
}

std::optional<std::string> AcasBackend::held_sandbox_id(const SandboxKey& key,
                                                        const std::string& kind) const {
    return state_->slots.held_id({key, kind});
}

std::size_t AcasBackend::requests_sent() const {
    return state_->pool->requests_sent();
}

std::size_t AcasBackend::open_clients() const {
    return state_->pool->open_clients();
}

Task<std::optional<DisposalFailure>> AcasBackend::dispose(SandboxKey key,
                                                          std::optional<std::string> kind) {
    auto state = state_;
    State::Operation operation(state);
    std::vector<std::optional<DisposalFailure>> failures;
    // id -> kind, owed again on failure
    std::map<std::string, std::string> ids = state->slots.take_key(key, kind);
    try {
        AcasCredentialRequest credential_request;
        credential_request.operation = AcasOperation::dispose;
        credential_request.scope = key.scope;
        credential_request.thread_id = key.thread_id;
        credential_request.key = key;
        auto binding = co_await state->resolve(std::move(credential_request));
        auto lease = co_await state->lease(binding);
        try {
            for (const auto& info : co_await lease->list_sandboxes(
                     key_selector(key, kind), deadline_after(state->config.client_wait))) {
                if (!labels_match_key(info.labels, key, kind))
                    continue;
                if (!ids.count(info.id)) {
                    const auto stamped = info.labels.find(std::string(identity_label::kind));
                    ids[info.id] =
                        kind.value_or(stamped != info.labels.end() ? stamped->second : "");
                }
            }
        } catch (const boost::system::system_error&) {
            throw;
        } catch (const std::exception& e) {
            state->log->warn("listing the key's sandboxes failed: {}", e.what());
            failures.push_back(DisposalFailure{DisposalCode::unlisted, e.what()});
        }
        for (const auto& [id, sandbox_kind] : ids) {
            auto failure =
                co_await state->delete_and_wait(lease.client(), id, state->config.delete_timeout);
            if (failure) {
                state->slots.owe({key, sandbox_kind}, id);
            }
            failures.push_back(std::move(failure));
        }
    } catch (const boost::system::system_error&) {
        throw;
    } catch (const std::exception& e) {
        for (const auto& [id, sandbox_kind] : ids)
            state->slots.owe({key, sandbox_kind}, id);
        failures.push_back(DisposalFailure{DisposalCode::unreachable, e.what()});
    }
    co_return fold_disposal_failures(failures);
}

Task<ScopePurge> AcasBackend::dispose_scope(std::string scope, std::string thread_id) {
    auto state = state_;
    State::Operation operation(state);
    const Conversation conversation{scope, thread_id};
    if (!state->slots.admit_purge(conversation)) {
        co_return ScopePurge{0, DisposalFailure{DisposalCode::unknown,
                                                "an acquire for this conversation is active; "
                                                "retry the purge after it finishes"}};
    }
    PurgeTicket ticket(state->slots, conversation);
    auto ids = state->slots.take_conversation(conversation);  // id -> slot, owed again on failure
    ScopePurge purge;
    std::vector<std::optional<DisposalFailure>> failures;
    try {
        AcasCredentialRequest credential_request;
        credential_request.operation = AcasOperation::dispose_scope;
        credential_request.scope = scope;
        credential_request.thread_id = thread_id;
        auto binding = co_await state->resolve(std::move(credential_request));
        auto lease = co_await state->lease(binding);
        try {
            for (const auto& info : co_await lease->list_sandboxes(
                     scope_selector(scope, thread_id), deadline_after(state->config.client_wait))) {
                ids.emplace(info.id, SlotKey{SandboxKey{scope, thread_id, "", ""}, ""});
            }
        } catch (const boost::system::system_error&) {
            throw;
        } catch (const std::exception& e) {
            state->log->warn("listing the conversation's sandboxes failed: {}", e.what());
            failures.push_back(DisposalFailure{DisposalCode::unlisted, e.what()});
        }
        for (const auto& [id, slot] : ids) {
            auto failure =
                co_await state->delete_and_wait(lease.client(), id, state->config.delete_timeout);
            if (failure) {
                state->slots.owe(slot, id);
            } else {
                ++purge.disposed;
                state->log->info("scope purge deleted sandbox {}", id);
            }
            failures.push_back(std::move(failure));
        }
    } catch (const boost::system::system_error&) {
        throw;
    } catch (const std::exception& e) {
        failures.push_back(DisposalFailure{DisposalCode::unreachable, e.what()});
    }
    purge.undisposed = fold_disposal_failures(failures);
    co_return purge;
}

Task<void> AcasBackend::close() {
    auto state = state_;
    state->lifecycle.close();
    auto executor = co_await asio::this_coro::executor;
    asio::steady_timer pause(executor);
    const auto give_up = deadline_after(state->config.client_close);
    int still_running = 0;
    for (;;) {
        still_running = state->lifecycle.active();
        if (still_running == 0 || SteadyClock::now() >= give_up)
            break;
        pause.expires_after(std::chrono::milliseconds(10));
        co_await pause.async_wait(asio::use_awaitable);
    }
    const auto entries = state->pool->stop();
    // Each client is closed on its own io_context (sandboxes are never touched), and close()
    // waits for every one of them: a close only posted to a loop that no longer runs would never
    // happen, and the caller would stop its loops believing it had. One on this io_context is
    // closed here and now.
    struct Closing {
        std::mutex mutex;
        bool ran = false;
        std::string failure;
    };
    const void* here = &asio::query(executor, asio::execution::context);
    std::vector<std::shared_ptr<Closing>> closings;
    for (const auto& entry : entries) {
        auto closing = std::make_shared<Closing>();
        closings.push_back(closing);
        auto close_one = [entry, closing] {
            std::string failure;
            try {
                entry->client->close();
            } catch (const std::exception& e) {
                failure = e.what();
            }
            std::lock_guard lock(closing->mutex);
            closing->ran = true;
            closing->failure = std::move(failure);
        };
        if (entry->context == here) {
            close_one();
        } else {
            asio::post(entry->executor, std::move(close_one));
        }
    }
    // Their own bound, so clients get their time even when draining used all of its own.
    const auto close_by = deadline_after(state->config.client_close);
    std::size_t never_ran = 0;
    std::vector<std::string> failures;
    for (;;) {
        never_ran = 0;
        failures.clear();
        for (const auto& closing : closings) {
            std::lock_guard lock(closing->mutex);
            if (!closing->ran) {
                ++never_ran;
            } else if (!closing->failure.empty()) {
                failures.push_back(closing->failure);
            }
        }
        if (never_ran == 0 || SteadyClock::now() >= close_by)
            break;
        pause.expires_after(std::chrono::milliseconds(10));
        co_await pause.async_wait(asio::use_awaitable);
    }
    std::vector<std::string> problems;
    if (still_running > 0) {
        problems.push_back(
            fmt::format("{} ACAS operation(s) were still running after client_close_seconds; "
                        "their clients were closed under them",
                        still_running));
    }
    if (never_ran > 0) {
        problems.push_back(fmt::format(
            "{} of {} client(s) were not closed within client_close_seconds: their io_context "
            "did not run the close",
            never_ran, closings.size()));
    }
    if (!failures.empty()) {
        problems.push_back(fmt::format("{} client(s) failed to close (first: {})", failures.size(),
                                       failures.front()));
    }
    if (!problems.empty()) {
        throw AcasClientCloseError(
            fmt::format("{}. Keep the owning io_contexts running until close() returns",
                        fmt::join(problems, "; ")));
    }
}

}  // namespace maf_sandbox::acas
