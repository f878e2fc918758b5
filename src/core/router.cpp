#include "maf_sandbox/core/router.hpp"
#include "maf_sandbox/core/error_detail.hpp"

#include <fmt/format.h>
#include <spdlog/logger.h>

#include <algorithm>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <chrono>
#include <exception>

#include "maf_sandbox/core/declarations_check.hpp"
#include "maf_sandbox/core/errors.hpp"
#include "name_lists.hpp"

namespace maf_sandbox {

using detail::join;
using detail::sorted_names;

namespace {

// Cancellation is the one exception the never-throwing operations let through: swallowing it
// would keep a cancelled caller waiting on the remaining backends.
Task<void> rethrow_if_cancelled(std::exception_ptr error) {
    auto state = co_await boost::asio::this_coro::cancellation_state;
    if (state.cancelled() != boost::asio::cancellation_type::none) {
        std::rethrow_exception(error);
    }
}

std::string_view rung_text(Isolation rung) {
    return rank_of(rung) ? to_string(rung) : std::string_view{"an unranked rung"};
}

}  // namespace

SandboxRouter::SandboxRouter(std::vector<std::shared_ptr<SandboxBackend>> backends,
                             SandboxRouterOptions options)
    : backends_(std::move(backends)), options_(std::move(options)) {
    if (!options_.log) {
        // A logger with no sinks, owned here: nothing global is registered.
        options_.log = std::make_shared<spdlog::logger>("maf_sandbox.router");
    }
    for (const auto& candidate : backends_) {
        if (!candidate) {
            throw InvalidArgument(
                "a null backend was registered with the sandbox router; register only constructed "
                "backends");
        }
    }
    if (backends_.empty()) {
        if (options_.selected) {
            throw NoSandboxBackend(fmt::format(
                "backend '{}' was selected but no backend is registered; register it, or leave "
                "the selection unset",
                *options_.selected));
        }
        return;
    }
    if (!options_.selected) {
        backend_ = backends_.front();
    } else {
        for (const auto& candidate : backends_) {
            if (candidate->name() == *options_.selected) {
                backend_ = candidate;
                break;
            }
        }
        if (!backend_) {
            std::vector<std::string> registered;
            for (const auto& candidate : backends_) {
                registered.push_back(candidate->name());
            }
            std::sort(registered.begin(), registered.end());
            throw NoSandboxBackend(fmt::format(
                "no registered sandbox backend is named '{}' (registered: {}); select one of the "
                "registered names, or register a backend with that name",
                *options_.selected, join(registered)));
        }
    }
    const auto rung = backend_->isolation();
    if (!meets_floor(rung, options_.min_isolation)) {
        throw SandboxBackendNotPermitted(fmt::format(
            "backend '{}' provides isolation '{}', below the host's floor '{}'; select a backend "
            "at '{}' or stronger, or lower the floor explicitly if the host accepts that boundary",
            backend_->name(), rung_text(rung), to_string(options_.min_isolation),
            to_string(options_.min_isolation)));
    }
}

void SandboxRouter::ensure_can_serve(const SandboxSpec& spec) const {
    if (!backend_) {
        return;
    }
    const auto& kind = spec->kind;
    const auto method_rules = method_scoped_rules(spec);

    auto required = spec->requires_capabilities;
    if (!method_rules.empty()) {
        required.insert(Capability::egress_methods);
    }
    std::set<Capability> denied_capabilities;
    for (auto capability : required) {
        if (options_.denied_capabilities.count(capability)) {
            denied_capabilities.insert(capability);
        }
    }
    if (!denied_capabilities.empty()) {
        throw SandboxCapabilityDenied(fmt::format(
            "kind '{}' requires capabilities the host denies: {} (the host denies: {}); remove "
            "them from the spec, or lift the host's denial",
            kind, sorted_names(denied_capabilities), sorted_names(options_.denied_capabilities)));
    }

    std::set<Identity> denied_identities;
    for (auto identity : spec.identities()) {
        if (options_.denied_identities.count(identity)) {
            denied_identities.insert(identity);
        }
    }
    if (!denied_identities.empty()) {
        throw SandboxIdentityDenied(fmt::format(
            "kind '{}' acts as identities the host denies: {} (the host denies: {}); remove the "
            "host tools that need them, or lift the host's denial",
            kind, sorted_names(denied_identities), sorted_names(options_.denied_identities)));
    }

    const auto floor = spec->min_isolation ? stronger(options_.min_isolation, *spec->min_isolation)
                                           : options_.min_isolation;
    const auto rung = backend_->isolation();
    if (!meets_floor(rung, floor)) {
        throw SandboxBackendNotPermitted(fmt::format(
            "kind '{}' needs isolation '{}' or stronger (host floor '{}', spec min_isolation "
            "'{}') but backend '{}' provides '{}'; select a backend at '{}' or stronger, or lower "
            "the spec's min_isolation",
            kind, to_string(floor), to_string(options_.min_isolation),
            spec->min_isolation ? to_string(*spec->min_isolation) : "unset", backend_->name(),
            rung_text(rung), to_string(floor)));
    }

    ensure_declared(spec, backend_->name(), backend_->declarations(), options_.min_isolation_scope);
}

Task<std::shared_ptr<Sandbox>> SandboxRouter::acquire(SandboxKey key, SandboxSpec spec) {
    if (!backend_) {
        throw NoSandboxBackend(fmt::format(
            "no sandbox backend is registered, so kind '{}' cannot run; register a backend with "
            "the router",
            spec->kind));
    }
    ensure_can_serve(spec);
    if (key.thread_id.empty()) {
        throw InvalidArgument(fmt::format(
            "kind '{}' was acquired with no bound conversation (the key's thread_id is empty); "
            "acquire from inside a request whose host context names the conversation",
            spec->kind));
    }
    auto effective = spec.with_isolation_scope_at_least(options_.min_isolation_scope);
    if (effective->isolation_scope == IsolationScope::call && key.call_id.empty()) {
        throw InvalidArgument(fmt::format(
            "kind '{}' runs at isolation scope 'call' but the key names no call (call_id is "
            "empty); set the key's call_id to the tool call's id",
            spec->kind));
    }
    co_return co_await backend_->acquire(std::move(key), std::move(effective));
}

Task<std::optional<DisposalFailure>> SandboxRouter::dispose(SandboxKey key,
                                                            std::optional<std::string> kind) {
    std::vector<std::optional<DisposalFailure>> failures;
    for (const auto& each : backends_) {
        std::exception_ptr error;
        try {
            auto failure = co_await each->dispose(key, kind);
            if (failure) {
                options_.log->warn(
                    "backend '{}' could not dispose a sandbox of thread '{}': {} ({})",
                    each->name(), key.thread_id, to_string(failure->code), failure->detail);
                failures.push_back(std::move(failure));
            }
        } catch (...) {
            error = std::current_exception();
        }
        if (error) {
            co_await rethrow_if_cancelled(error);
            auto detail = fmt::format("backend '{}' raised {}", each->name(), error_detail(error));
            options_.log->warn("disposal of a sandbox of thread '{}' failed: {}", key.thread_id,
                               detail);
            failures.push_back(DisposalFailure{DisposalCode::unknown, std::move(detail)});
        }
    }
    co_return fold_disposal_failures(failures);
}

Task<ScopePurge> SandboxRouter::dispose_scope(std::string scope, std::string thread_id) {
    ScopePurge total;
    std::vector<std::optional<DisposalFailure>> failures;
    for (const auto& each : backends_) {
        std::exception_ptr error;
        try {
            auto purge = co_await each->dispose_scope(scope, thread_id);
            total.disposed += purge.disposed;
            if (purge.undisposed) {
                options_.log->warn("backend '{}' left sandboxes of thread '{}' undisposed: {} ({})",
                                   each->name(), thread_id, to_string(purge.undisposed->code),
                                   purge.undisposed->detail);
                failures.push_back(std::move(purge.undisposed));
            }
        } catch (...) {
            error = std::current_exception();
        }
        if (error) {
            co_await rethrow_if_cancelled(error);
            auto detail = fmt::format("backend '{}' raised {}", each->name(), error_detail(error));
            options_.log->warn("purge of thread '{}' failed: {}", thread_id, detail);
            failures.push_back(DisposalFailure{DisposalCode::unknown, std::move(detail)});
        }
    }
    total.undisposed = fold_disposal_failures(failures);
    co_return total;
}

Task<std::optional<std::string>> SandboxRouter::dispose_within(SandboxKey key, std::string kind,
                                                               Seconds timeout) {
    using namespace boost::asio::experimental::awaitable_operators;
    boost::asio::steady_timer deadline(
        co_await boost::asio::this_coro::executor,
        std::chrono::duration_cast<std::chrono::steady_clock::duration>(timeout));
    const auto thread = key.thread_id;
    auto outcome =
        co_await (dispose(std::move(key), kind) || deadline.async_wait(boost::asio::use_awaitable));
    if (outcome.index() == 1) {
        options_.log->warn("disposal of kind '{}' for thread '{}' did not complete within {}s",
                           kind, thread, timeout.count());
        co_return fmt::format("disposal of kind '{}' did not complete within {}s", kind,
                              timeout.count());
    }
    if (const auto& failure = std::get<0>(outcome)) {
        // The detail went to the log in dispose(); the reason stays free of provider text.
        co_return fmt::format("disposal of kind '{}' failed ({})", kind, to_string(failure->code));
    }
    co_return std::nullopt;
}

Task<bool> SandboxRouter::dispose_kind(SandboxKey key, std::string kind, Seconds timeout) {
    auto reason = co_await dispose_within(std::move(key), std::move(kind), timeout);
    co_return !reason.has_value();
}

Task<std::optional<std::string>> SandboxRouter::cleanup_call(std::shared_ptr<Sandbox> sandbox,
                                                             SandboxKey key, SandboxSpec spec,
                                                             std::string call_path,
                                                             Seconds timeout) {
    if (!backend_) {
        co_return "no sandbox backend is registered, so there is nothing to clean up with";
    }
    if (!backend_->declarations().declares(Capability::reclaim)) {
        co_return co_await dispose_within(std::move(key), spec->kind, timeout);
    }
    if (!sandbox) {
        co_return fmt::format("no sandbox was given to reclaim '{}' from", call_path);
    }
    std::exception_ptr error;
    try {
        const auto work_dir = spec->work_dir ? *spec->work_dir : sandbox->base_directory();
        co_await sandbox->reclaim(call_path, work_dir, timeout);
    } catch (...) {
        error = std::current_exception();
    }
    if (!error) {
        co_return std::nullopt;
    }
    co_await rethrow_if_cancelled(error);
    options_.log->warn("reclaiming '{}' for kind '{}' failed: {}", call_path, spec->kind,
                       error_detail(error));
    co_return fmt::format("the removal call failed: {}", error_detail(error));
}

}  // namespace maf_sandbox
