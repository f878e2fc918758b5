// AcasBackend::acquire as the list of its phases. Each phase is a member of Acquisition, which
// holds what the acquire knows as it goes (the slot, what the spec needs, the client it talks
// through), and states its contract where it is declared. Errors leaving a phase say what it was
// doing, and the whole acquire adds the key it was for.

#include <fmt/format.h>
#include <spdlog/logger.h>
#include <boost/asio/this_coro.hpp>

#include "backend_state.hpp"
#include "convergence.hpp"
#include "maf_sandbox/acas/backend.hpp"
#include "maf_sandbox/core/declarations_check.hpp"
#include "maf_sandbox/core/error_context.hpp"
#include "maf_sandbox/core/labels.hpp"
#include "maf_sandbox/core/paths.hpp"
#include "maf_sandbox/core/random_id.hpp"
#include "maf_sandbox/core/router.hpp"
#include "maf_sandbox/net/http.hpp"
#include "probes.hpp"
#include "replacement_notice.hpp"

namespace maf_sandbox::acas {

namespace asio = boost::asio;

namespace {

constexpr const char* kAcquireLabel = "acquire";
// Labels of ours beyond the identity table's: the acquire nonce and a replacement's origin.
bool reserved_label(std::string_view label) {
    return is_identity_label(label) || label == kAcquireLabel ||
           label == replacement_notice::kReplacedFromLabel;
}

bool needs(const SandboxSpec& spec, Capability c) {
    return spec->requires_capabilities.count(c) > 0;
}

bool needs_storage(const SandboxSpec& spec) {
    for (auto c : spec->requires_capabilities) {
        if (c == Capability::exec || c == Capability::files_in || c == Capability::files_out ||
            c == Capability::files_list || c == Capability::files_delete ||
            c == Capability::host_tools) {
            return true;
        }
    }
    return false;
}

std::string storage_base(const SandboxSpec& spec) {
    if (!spec->work_dir)
        return kDefaultWorkDir;
    const auto& dir = *spec->work_dir;
    if (dir.empty() || dir.front() != '/' || dir.find('\\') != std::string::npos ||
        dir.find('\0') != std::string::npos || normpath(dir) != dir || dir == "/") {
        throw InvalidArgument(fmt::format(
            "work_dir '{}' must be a normalised absolute guest path below '/' (the storage base); "
            "leave it unset to use {}",
            dir, kDefaultWorkDir));
    }
    return dir;
}

// The capabilities a completed removal refusal withdraws (probes.cpp): a spec needing any of them
// is what the image hint refuses before a create.
bool refused_by_removal(const SandboxSpec& spec) {
    return needs(spec, Capability::files_out) || needs(spec, Capability::host_tools) ||
           needs(spec, Capability::files_delete);
}

bool is_cancellation(const std::exception_ptr& failure) {
    try {
        std::rethrow_exception(failure);
    } catch (const boost::system::system_error& e) {
        return e.code() == asio::error::operation_aborted;
    } catch (...) {
        return false;
    }
}

// Refuses, before anything is asked of the service, what this backend never serves.
void check_spec(const SandboxKey& key, const SandboxSpec& spec) {
    if (key.thread_id.empty()) {
        throw InvalidArgument("a sandbox needs a bound conversation (thread id); none was given");
    }
    if (spec->isolation_scope == IsolationScope::call && key.call_id.empty()) {
        throw InvalidArgument("isolation scope `call` needs the key to name the tool call");
    }
    for (const auto& [label, value] : spec->labels) {
        if (reserved_label(label)) {
            throw InvalidArgument(
                fmt::format("reserved sandbox label '{}' in the spec; rename it", label));
        }
    }
}

// The sandboxes that hold the key now: listed by its labels, without those being deleted or
// failed and, for a conversation key, without call-scoped ones. `listed` gets every id the
// listing named, in any state (a sandbox of ours that a winner already deleted shows as Deleting).
Task<std::vector<SandboxInfo>> key_holders(AcasClient& client, const SandboxKey& key,
                                           const std::string& kind, Deadline deadline,
                                           std::set<std::string>* listed = nullptr) {
    auto found = co_await client.list_sandboxes(key_selector(key, kind), deadline);
    if (listed) {
        for (const auto& info : found)
            listed->insert(info.id);
    }
    const bool conversation_key = key.call_id.empty();
    std::erase_if(found, [&](const SandboxInfo& info) {
        return (conversation_key && info.labels.count(std::string(identity_label::call))) ||
               net::iequals(info.state, "Deleting") || net::iequals(info.state, "Failed");
    });
    co_return found;
}

// Deletes every holder but `winner` and `except` (the caller's own, which it deletes itself). No
// waiting: a sandbox being deleted no longer holds the key, and its creator, converging on the
// same winner, deletes it too. A failure is only logged; the next converger tries again.
Task<void> dispose_losers(AcasBackend::State& state, AcasClient& client,
                          const std::vector<SandboxInfo>& holders, const std::string& winner,
                          const std::string& except, Deadline deadline) {
    for (const auto& info : holders) {
        if (info.id == winner || info.id == except)
            continue;
        try {
            co_await client.delete_sandbox(info.id, deadline);
            state.log->info("duplicate sandbox {} of the key disposed; {} holds it", info.id,
                            winner);
        } catch (const boost::system::system_error&) {
            throw;
        } catch (const std::exception& e) {
            state.log->warn("disposing the duplicate sandbox {} failed: {}", info.id, e.what());
        }
    }
}

class Acquisition {
  public:
    Acquisition(std::shared_ptr<AcasBackend::State> state, SandboxKey key, SandboxSpec spec)
        : state_(std::move(state)),
          config_(state_->config),
          key_(std::move(key)),
          spec_(std::move(spec)),
          slot_{key_, spec_->kind},
          storage_(needs_storage(spec_)),
          base_(storage_base(spec_)),
          wanted_egress_(egress_of(spec_)) {}

    // The context every error leaving this acquire gains. Names the key by scope, thread and
    // call (the agent directory is a host path, so it stays out).
    std::string context() const {
        return fmt::format("acquire sandbox for key {}/{}{}{} kind {}", key_.scope, key_.thread_id,
                           key_.call_id.empty() ? "" : "/", key_.call_id, spec_->kind);
    }

    Task<std::shared_ptr<Sandbox>> run() {
        co_await admit();
        co_await settle_owed();
        auto held = co_await warm();
        bool fresh = false;
        std::optional<SandboxInfo> adopted;
        if (!held) {
            auto holder = co_await find_by_key();
            if (!holder) {
                auto created = co_await create();
                held = std::move(created.held);
                fresh = held != nullptr;
                holder = std::move(created.winner);
            }
            if (!held) {
                held = co_await adopt(*holder);
                adopted = std::move(holder);
            }
        }
        co_await prepare(held, fresh);
        auto handle = hand_over(std::move(held));
        // Adopted from the service: a replacement another process made is told here, once.
        if (adopted)
            co_await replacement_notice::take(*state_, client(), *adopted, *handle);
        co_return handle;
    }

  private:
    // Admitted for the conversation (refused while a scope purge of it runs), alone on the slot
    // across io_contexts, with the credential the host binds and a client leased for it.
    Task<void> admit() {
        ticket_.emplace(state_->slots, Conversation{key_.scope, key_.thread_id});
        guard_ = co_await state_->slots.lock_for(slot_)->lock();
        AcasCredentialRequest request;
        request.operation = AcasOperation::acquire;
        request.scope = key_.scope;
        request.thread_id = key_.thread_id;
        request.key = key_;
        binding_ = co_await state_->resolve(std::move(request));
        lease_ = co_await state_->lease(binding_);
    }

    AcasClient& client() const { return lease_.client(); }

    // Every deletion the slot owes (an earlier sandbox that could not be deleted) succeeds before
    // anything is handed out; otherwise SandboxCleanupPending, with nothing created.
    Task<void> settle_owed() {
        for (const auto& id : state_->slots.owed(slot_)) {
            const auto failure = co_await state_->delete_and_wait(
                client(), id, std::min(Seconds{30.0}, config_.delete_timeout));
            if (!failure)
                state_->slots.settle(slot_, id);
        }
        if (state_->slots.owes(slot_)) {
            throw SandboxCleanupPending(
                "an earlier sandbox of this key and kind could not be deleted yet; retry the "
                "acquire (or dispose) once the service answers");
        }
    }

    // The sandbox this process holds for the slot, resumed: null when there is none or the
    // service no longer has it (then it is forgotten). Refuses a held sandbox whose egress or
    // storage base differs from the spec's, keeping it; a resume that fails otherwise is a
    // SandboxTransientError that keeps the record until the kind is disposed.
    Task<std::shared_ptr<HeldSandbox>> warm() {
        auto held = state_->slots.held(slot_);
        if (!held)
            co_return nullptr;
        if (held->egress != wanted_egress_) {
            throw AcasEgressPolicyConflict(fmt::format(
                "the warm sandbox of this key and kind was created with egress {} and the spec "
                "asks "
                "for {}; the original is kept. Dispose the kind (and require success) before "
                "changing policy, or use another key",
                describe(held->egress), describe(wanted_egress_)));
        }
        if (held->base != base_) {
            throw InvalidArgument(fmt::format(
                "the warm sandbox uses the storage base {}; a held sandbox cannot change it to {}",
                held->base, base_));
        }
        try {
            co_await client().ensure_running(held->id, config_.poll_interval,
                                             deadline_after(config_.resume_timeout));
            state_->log->info("sandbox reused: {}", held->id);
        } catch (const AcasServiceError& e) {
            if (e.status() != 404) {
                state_->log->info("resuming sandbox {} failed: {}", held->id, e.what());
                std::throw_with_nested(SandboxTransientError(
                    "the held sandbox could not be resumed; dispose the kind and acquire again"));
            }
            state_->slots.forget(held);
            held.reset();
        }
        co_return held;
    }

    // Get-or-create across processes: the sandbox another process made for the key, found by
    // the service's labels (conversation scope only; a call-scoped key is never shared).
    // Duplicates an earlier race left are disposed by the rule every replica uses.
    Task<std::optional<SandboxInfo>> find_by_key() {
        if (spec_->isolation_scope == IsolationScope::call)
            co_return std::nullopt;
        const auto found = co_await with_context(
            "list the key's sandboxes",
            key_holders(client(), key_, spec_->kind, deadline_after(config_.client_wait)));
        const auto winner = convergence::winner(found);
        if (winner) {
            co_await dispose_losers(*state_, client(), found, winner->id, "",
                                    deadline_after(config_.client_wait));
        }
        co_return winner;
    }

    // Either ours, held and Running, or (ours lost a race) the winner to adopt instead.
    struct Created {
        std::shared_ptr<HeldSandbox> held;
        std::optional<SandboxInfo> winner;
    };

    // A new sandbox of the spec's image, converged with racing replicas before anything runs
    // in it. On any failure (cancellation included) everything this acquire made is removed,
    // found by its nonce, and what cannot be deleted is owed by the slot.
    Task<Created> create() {
        auto request = co_await creation_request();
        const auto nonce = request.labels.at(kAcquireLabel);
        Created created;
        std::exception_ptr failure;
        try {
            const auto deadline = deadline_after(config_.create_timeout);
            const auto info =
                co_await with_context("create sandbox", client().create_sandbox(request, deadline));
            created.held = hold_new(info, source_key(request));
            state_->log->info("sandbox created: {} (image {})", info.id,
                              request.prebuilt_name.value_or(request.disk_image_id.value_or("?")));
            created.winner = co_await converge(info);
            if (created.winner) {
                co_await yield_to(*created.winner, created.held);
                created.held.reset();
            } else {
                co_await await_running(info.id, deadline);
            }
        } catch (...) {
            failure = std::current_exception();
        }
        if (failure) {
            // Reset here, in this frame: after a cancellation, awaiting the cleanup coroutine
            // would otherwise throw operation_aborted before it removed anything.
            co_await asio::this_coro::reset_cancellation_state();
            co_await remove_made(nonce, created.held);
            std::rethrow_exception(failure);
        }
        co_return created;
    }

    // The create request: the image resolved to a source (refused before any create while the
    // image hint withdraws what the spec needs), the key's labels and this acquire's nonce.
    Task<CreateSandboxRequest> creation_request() {
        auto request = co_await with_context(
            "resolve the image",
            state_->images.resolve(client(), spec_, deadline_after(config_.client_wait)));
        const auto image = source_key(request);
        if (refused_by_removal(spec_) && state_->images.hint_refuses(image)) {
            throw SandboxCapabilityNotSupported(fmt::format(
                "a sandbox of image {} could not remove a file the file plane wrote within the "
                "last {:.0f} s, so files_out, host_tools and files_delete are withdrawn for it; "
                "nothing was created. Fix the image (or run as root) and acquire again after the "
                "hint expires",
                image, config_.image_hint.count()));
        }
        request.labels = sandbox_labels(key_, spec_);
        request.labels[kAcquireLabel] = random_hex(12);
        for (const auto& host : wanted_egress_.hosts)
            request.allow_hosts.push_back(host);
        request.auto_suspend_seconds = config_.auto_suspend_seconds;
        co_return request;
    }

    // Registered before configuring, so a purge or dispose can reach it.
    std::shared_ptr<HeldSandbox> hold_new(const SandboxInfo& info, std::string image) {
        auto held = std::make_shared<HeldSandbox>();
        held->id = info.id;
        held->key = key_;
        held->kind = spec_->kind;
        held->base = base_;
        held->image = std::move(image);
        held->egress = wanted_egress_;
        held->binding = binding_;
        state_->slots.hold(held);
        return held;
    }

    // Lists the key's holders again with ours among them and names the winner by the rule every
    // replica uses; disposes the other losers. nullopt when ours won (or the key is call-scoped).
    // SandboxCleanupPending when a purge or dispose of the key deleted ours meanwhile.
    Task<std::optional<SandboxInfo>> converge(const SandboxInfo& ours) {
        if (spec_->isolation_scope == IsolationScope::call)
            co_return std::nullopt;
        std::set<std::string> listed;
        auto holders = co_await with_context(
            fmt::format("list the key's sandboxes after creating {}", ours.id),
            key_holders(client(), key_, spec_->kind, deadline_after(config_.client_wait), &listed));
        if (!listed.count(ours.id))
            holders.push_back(ours);  // created, not listed yet: it still competes
        const auto winner = convergence::winner(holders);
        if (!winner) {
            // Ours listed as Deleting and no other holder: a purge or dispose of the key ran
            // meanwhile. What was made is removed by the caller.
            throw SandboxCleanupPending(
                "the key's sandboxes were being deleted while this acquire created one; acquire "
                "again");
        }
        co_await dispose_losers(*state_, client(), holders, winner->id, ours.id,
                                deadline_after(config_.client_wait));
        if (winner->id == ours.id)
            co_return std::nullopt;
        co_return winner;
    }

    // Ours lost the race for the key: forget it and delete it without waiting (Deleting no
    // longer holds the key). Owed on failure, so the slot's next acquire deletes it first.
    Task<void> yield_to(const SandboxInfo& winner, const std::shared_ptr<HeldSandbox>& ours) {
        state_->log->info("sandbox {} lost the race for its key to {}; disposing it", ours->id,
                          winner.id);
        state_->slots.forget(ours);
        bool deleted = false;
        try {
            co_await client().delete_sandbox(ours->id, deadline_after(config_.client_wait));
            deleted = true;
        } catch (const boost::system::system_error&) {
            throw;
        } catch (const std::exception& e) {
            state_->log->warn("disposing the losing sandbox {} failed: {}", ours->id, e.what());
        }
        if (!deleted)
            state_->slots.owe(slot_, ours->id);
    }

    // Running, with its lifecycle policy set: never leave a sandbox billable without it.
    Task<void> await_running(const std::string& id, Deadline deadline) {
        co_await with_context(fmt::format("wait for sandbox {} to run", id),
                              client().wait_until_running(id, config_.poll_interval, deadline));
        co_await with_context(
            fmt::format("set the lifecycle policy of sandbox {}", id),
            client().set_lifecycle(
                id, LifecyclePolicy{config_.auto_suspend_seconds, config_.auto_delete_seconds},
                deadline_after(config_.client_wait)));
    }

    // After a failed create: forgets ours and deletes every sandbox carrying this acquire's
    // nonce (which also reaches one whose create answer was lost); the slot owes what fails.
    // Its caller has reset the coroutine's cancellation.
    Task<void> remove_made(const std::string& nonce, const std::shared_ptr<HeldSandbox>& held) {
        state_->log->warn("acquire failed while creating a sandbox; removing what it made");
        std::set<std::string> ids;
        if (held) {
            state_->slots.forget(held);
            ids.insert(held->id);
        }
        std::map<std::string, std::string> nonce_selector;
        nonce_selector[kAcquireLabel] = nonce;
        try {
            for (const auto& info :
                 co_await client().list_sandboxes(nonce_selector, deadline_after(Seconds{30.0}))) {
                ids.insert(info.id);
            }
        } catch (const std::exception& e) {
            state_->log->warn("listing the orphans of a failed acquire failed: {}", e.what());
        }
        for (const auto& id : ids) {
            const auto failure = co_await state_->delete_and_wait(
                client(), id, std::min(Seconds{60.0}, config_.delete_timeout));
            if (failure)
                state_->slots.owe(slot_, id);
        }
    }

    // The service's sandbox for the key (another process's, or the winner of a race this
    // acquire lost) held as the slot's, resumed. Refuses one created with another egress,
    // keeping it for its users.
    Task<std::shared_ptr<HeldSandbox>> adopt(const SandboxInfo& info) {
        const auto existing = egress_of(info);
        if (existing != wanted_egress_) {
            throw AcasEgressPolicyConflict(fmt::format(
                "the live sandbox {} of this key and kind was created with egress {} and the "
                "spec asks for {}; the original is kept. Dispose the kind before changing "
                "policy",
                info.id, describe(existing), describe(wanted_egress_)));
        }
        auto adopted = std::make_shared<HeldSandbox>();
        adopted->id = info.id;
        adopted->key = key_;
        adopted->kind = spec_->kind;
        adopted->base = base_;
        adopted->egress = existing;
        adopted->binding = binding_;
        co_await with_context(fmt::format("resume sandbox {}", info.id),
                              client().ensure_running(info.id, config_.poll_interval,
                                                      deadline_after(config_.resume_timeout)));
        state_->slots.hold(adopted);
        state_->log->info("sandbox reused from the service: {}", info.id);
        co_return adopted;
    }

    // The acquire probes (capture, host tools, removal) and the storage base. A sandbox this
    // acquire created is invalidated when they fail; a warm or adopted one is kept, except on
    // cancellation, which resets the coroutine's cancellation so cleanup can run.
    Task<void> prepare(const std::shared_ptr<HeldSandbox>& held, bool fresh) {
        std::exception_ptr failure;
        try {
            co_await with_context(fmt::format("prepare sandbox {}", held->id), probe(held));
        } catch (...) {
            failure = std::current_exception();
        }
        if (!failure)
            co_return;
        if (fresh || is_cancellation(failure)) {
            co_await asio::this_coro::reset_cancellation_state();
            if (fresh)
                co_await state_->invalidate(held, "acquire could not prepare it");
        }
        std::rethrow_exception(failure);
    }

    Task<void> probe(std::shared_ptr<HeldSandbox> held) {
        co_await probes::run_acquire_probes(*state_, client(), held, spec_,
                                            deadline_after(config_.probe_timeout));
        if (storage_) {
            co_await probes::ensure_storage_base(*state_, client(), held,
                                                 deadline_after(config_.read_timeout));
        }
    }

    // The handle the caller gets. Refused (retry the acquire) when the sandbox was invalidated
    // before this final check. Carries the notice of a sandbox the slot discarded after a caller
    // had used it, reported once: this is where a replacement is told to the caller.
    std::shared_ptr<Sandbox> hand_over(std::shared_ptr<HeldSandbox> held) {
        if (held->invalidated) {
            throw SandboxInvalidated(
                "the sandbox was invalidated during acquire; retry the acquire");
        }
        auto handle = std::make_shared<AcasSandbox>(state_, held);
        held->handed_out = true;
        if (auto notice = state_->slots.take_replacement(slot_);
            notice && notice->previous_id != held->id) {
            handle->mark_replaced(std::move(*notice));
        }
        return handle;
    }

    std::shared_ptr<AcasBackend::State> state_;
    const AcasSandboxConfig& config_;
    const SandboxKey key_;
    const SandboxSpec spec_;
    const SlotKey slot_;
    const bool storage_;
    const std::string base_;
    const EgressRecord wanted_egress_;
    // Released in reverse: the client, then the slot's lock, then the admission.
    std::optional<AcquireTicket> ticket_;
    detail::AsyncMutex::Guard guard_;
    Binding binding_;
    ClientLease lease_;
};

}  // namespace

Task<std::shared_ptr<Sandbox>> AcasBackend::acquire(SandboxKey key, SandboxSpec spec) {
    auto state = state_;
    State::Operation operation(state);
    check_spec(key, spec);
    // What the declarations do not cover (method-scoped egress, unrestricted egress, withheld
    // capabilities, limits) is refused here as the router refuses it.
    ensure_declared(spec, name(), declarations());
    Acquisition acquisition(state, std::move(key), std::move(spec));
    co_return co_await with_context(acquisition.context(), acquisition.run());
}

}  // namespace maf_sandbox::acas
