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
#include "convergence.hpp"
#include "images.hpp"
#include "maf_sandbox/core/declarations_check.hpp"
#include "maf_sandbox/core/labels.hpp"
#include "maf_sandbox/core/paths.hpp"
#include "maf_sandbox/core/random_id.hpp"
#include "maf_sandbox/core/router.hpp"
#include "maf_sandbox/core/shell_quote.hpp"
#include "maf_sandbox/net/http.hpp"
#include "probes.hpp"

namespace maf_sandbox::acas {

namespace asio = boost::asio;

namespace {

constexpr const char* kAcquireLabel = "acquire";

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

bool needs(const SandboxSpec& spec, Capability c) {
    return spec->requires_capabilities.count(c) > 0;
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

std::string source_key(const CreateSandboxRequest& request) {
    return request.prebuilt_name ? "prebuilt:" + *request.prebuilt_name
                                 : "disk:" + request.disk_image_id.value_or("");
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

}  // namespace

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
    std::lock_guard lock(state_->mutex);
    // Until the emulator has named its rung, claim nothing.
    return state_->rung.value_or(Isolation::none);
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
    std::lock_guard lock(state_->mutex);
    const auto found = state_->held.find({key, kind});
    if (found == state_->held.end())
        return std::nullopt;
    return found->second->id;
}

std::size_t AcasBackend::requests_sent() const {
    std::lock_guard lock(state_->mutex);
    std::size_t total = state_->requests_of_closed_clients;
    for (const auto& entry : state_->pool)
        total += entry->client->stats().requests;
    return total;
}

std::size_t AcasBackend::open_clients() const {
    std::lock_guard lock(state_->mutex);
    return state_->pool.size();
}

namespace {
// Operator commands act for whoever runs them, not for a conversation.
AcasCredentialRequest operator_request() {
    AcasCredentialRequest request;
    request.operation = AcasOperation::dispose_scope;
    return request;
}

// The README's import_disk_image default name: the last path segment, ':' and '@' as '-'.
std::string default_image_name(const std::string& reference) {
    auto name = reference.substr(reference.rfind('/') + 1);
    for (auto& c : name) {
        if (c == ':' || c == '@')
            c = '-';
    }
    return name.substr(0, 60);
}

bool is_ready(const DiskImageInfo& image) {
    return net::iequals(image.state, "Ready") || net::iequals(image.state, "Succeeded");
}
}  // namespace

Task<std::vector<SandboxInfo>> AcasBackend::list_sandboxes(
    std::map<std::string, std::string> labels) {
    auto state = state_;
    State::Operation operation(state);
    auto binding = co_await state->resolve(operator_request());
    auto lease = co_await state->lease(binding);
    co_return co_await lease->list_sandboxes(std::move(labels),
                                             deadline_after(state->config.client_wait));
}

Task<bool> AcasBackend::remove_sandbox(std::string id) {
    auto state = state_;
    State::Operation operation(state);
    require_path_segment(id, "the sandbox id");
    auto binding = co_await state->resolve(operator_request());
    auto lease = co_await state->lease(binding);
    const auto deadline = deadline_after(state->config.delete_timeout);
    const bool deleted = co_await lease->delete_sandbox(id, deadline);
    if (deleted)
        co_await lease->wait_until_deleted(id, state->config.poll_interval, deadline);
    co_return deleted;
}

Task<AcasBackend::Images> AcasBackend::list_images() {
    auto state = state_;
    State::Operation operation(state);
    auto binding = co_await state->resolve(operator_request());
    auto lease = co_await state->lease(binding);
    Images images;
    images.prebuilt =
        co_await lease->list_prebuilt_images(deadline_after(state->config.client_wait));
    std::sort(images.prebuilt.begin(), images.prebuilt.end());
    images.imported = co_await lease->list_disk_images(deadline_after(state->config.client_wait));
    co_return images;
}

Task<AcasBackend::ImportedImage> AcasBackend::import_disk_image(std::string image, std::string name,
                                                                Seconds timeout) {
    auto state = state_;
    State::Operation operation(state);
    if (images::names_a_prebuilt_image(image)) {
        throw InvalidArgument(fmt::format(
            "'{}' has no tag, so it names a prebuilt catalogue image that every sandbox group "
            "already has; import a repo:tag instead",
            image));
    }
    const auto reference = images::qualify(image, state->config.registry);
    if (name.empty())
        name = default_image_name(reference);
    const auto deadline = deadline_after(timeout);
    auto binding = co_await state->resolve(operator_request());
    auto lease = co_await state->lease(binding);
    ImportedImage result;
    std::optional<DiskImageInfo> pending;
    auto listed = co_await lease->list_disk_images(deadline);
    for (auto& existing : listed) {
        if (existing.base != reference || existing.id.empty() ||
            net::iequals(existing.state, "Failed")) {
            continue;
        }
        result.already_imported = true;
        if (is_ready(existing)) {
            result.image = std::move(existing);
            co_return result;
        }
        pending = std::move(existing);
    }
    DiskImageInfo current;
    if (pending) {
        current = std::move(*pending);
    } else {
        current = co_await lease->create_disk_image(reference, name, deadline);
    }
    auto executor = co_await asio::this_coro::executor;
    asio::steady_timer pause(executor);
    while (!is_ready(current)) {
        if (net::iequals(current.state, "Failed")) {
            throw AcasServiceError(
                fmt::format("the service could not import {} (disk image {} failed); check the "
                            "reference and that the group may pull from the registry",
                            reference, current.id),
                0, "DiskImageFailed");
        }
        if (SteadyClock::now() >= deadline) {
            throw Timeout(fmt::format(
                "disk image {} of {} was not Ready within {:.0f} s (state {}); run the import "
                "again later, it resumes",
                current.id, reference, timeout.count(), current.state));
        }
        pause.expires_after(
            std::chrono::duration_cast<SteadyClock::duration>(state->config.poll_interval));
        co_await pause.async_wait(asio::use_awaitable);
        auto again = co_await lease->get_disk_image(current.id, deadline);
        if (!again) {
            throw AcasServiceError(
                fmt::format("disk image {} of {} disappeared while importing; run the import "
                            "again",
                            current.id, reference),
                404, "DiskImageNotFound");
        }
        current = std::move(*again);
    }
    result.image = std::move(current);
    co_return result;
}

Task<void> AcasBackend::discover() {
    State::Operation operation(state_);
    AcasCredentialRequest request;
    request.operation = AcasOperation::acquire;
    auto binding = co_await state_->resolve(std::move(request));
    {
        auto lease = co_await state_->lease(binding);
        co_await lease->list_prebuilt_images(deadline_after(state_->config.client_wait));
    }
    // discover() may run on a short-lived io_context (the CLI's): drop its client so a later
    // context allocated at the same address never inherits a client bound to a dead one.
    auto executor = co_await asio::this_coro::executor;
    const void* context = &asio::query(executor, asio::execution::context);
    std::lock_guard lock(state_->mutex);
    std::erase_if(state_->pool, [&](const auto& entry) {
        if (entry->context != context || entry->leases > 0)
            return false;
        state_->requests_of_closed_clients += entry->client->stats().requests;
        entry->client->close();
        return true;
    });
}

namespace {

// Marks (scope, thread) as having an acquire in flight; refuses while a purge runs.
class AcquireTicket {
  public:
    AcquireTicket(std::shared_ptr<AcasBackend::State> state,
                  std::pair<std::string, std::string> conversation)
        : state_(std::move(state)), conversation_(std::move(conversation)) {
        std::lock_guard lock(state_->mutex);
        if (state_->purging[conversation_] > 0) {
            throw SandboxOutputError(
                "a scope purge for this conversation is running; acquire again after it finishes");
        }
        ++state_->acquiring[conversation_];
    }
    ~AcquireTicket() {
        std::lock_guard lock(state_->mutex);
        if (--state_->acquiring[conversation_] == 0)
            state_->acquiring.erase(conversation_);
    }
    AcquireTicket(const AcquireTicket&) = delete;
    AcquireTicket& operator=(const AcquireTicket&) = delete;

  private:
    std::shared_ptr<AcasBackend::State> state_;
    std::pair<std::string, std::string> conversation_;
};

class PurgeTicket {
  public:
    PurgeTicket(std::shared_ptr<AcasBackend::State> state,
                std::pair<std::string, std::string> conversation)
        : state_(std::move(state)), conversation_(std::move(conversation)) {}
    ~PurgeTicket() {
        std::lock_guard lock(state_->mutex);
        if (--state_->purging[conversation_] == 0)
            state_->purging.erase(conversation_);
    }
    PurgeTicket(const PurgeTicket&) = delete;
    PurgeTicket& operator=(const PurgeTicket&) = delete;

  private:
    std::shared_ptr<AcasBackend::State> state_;
    std::pair<std::string, std::string> conversation_;
};

// Resolves the spec's image to a create source before anything is created.
Task<CreateSandboxRequest> image_source(AcasBackend::State& state, AcasClient& client,
                                        const SandboxSpec& spec, Deadline deadline) {
    CreateSandboxRequest request;
    if (spec->image_id) {
        request.disk_image_id = *spec->image_id;
        co_return request;
    }
    const std::string image = spec->image.value_or("ubuntu");
    if (images::names_a_prebuilt_image(image)) {
        {
            std::lock_guard lock(state.mutex);
            if (state.prebuilt_cache.count(image)) {
                request.prebuilt_name = image;
                co_return request;
            }
        }
        auto names = co_await client.list_prebuilt_images(deadline);
        std::sort(names.begin(), names.end());
        if (std::find(names.begin(), names.end(), image) == names.end()) {
            std::string listed;
            for (const auto& n : names)
                listed += (listed.empty() ? "" : ", ") + n;
            throw InvalidArgument(fmt::format(
                "'{}' is not in the service's prebuilt image catalogue. It provides: {}. A private "
                "image needs its tag (repo:tag), qualified by the configured registry",
                image, listed.empty() ? std::string("nothing - the catalogue is empty") : listed));
        }
        std::lock_guard lock(state.mutex);
        state.prebuilt_cache.insert(image);
        request.prebuilt_name = image;
        co_return request;
    }
    const auto reference = images::qualify(image, state.config.registry);
    {
        std::lock_guard lock(state.mutex);
        if (auto found = state.disk_image_cache.find(reference);
            found != state.disk_image_cache.end()) {
            request.disk_image_id = found->second;
            co_return request;
        }
    }
    for (const auto& disk : co_await client.list_disk_images(deadline)) {
        if (disk.base == reference && !disk.id.empty()) {
            std::lock_guard lock(state.mutex);
            state.disk_image_cache[reference] = disk.id;
            request.disk_image_id = disk.id;
            co_return request;
        }
    }
    throw InvalidArgument(fmt::format(
        "the image {} was never imported into this sandbox group; import it with `maf-sandbox "
        "images import {}` or pin spec.image_id",
        reference, image));
}

}  // namespace

Task<std::shared_ptr<Sandbox>> AcasBackend::acquire(SandboxKey key, SandboxSpec spec) {
    auto state = state_;
    State::Operation operation(state);
    const auto& config = state->config;
    if (key.thread_id.empty()) {
        throw InvalidArgument("a sandbox needs a bound conversation (thread id); none was given");
    }
    if (spec->isolation_scope == IsolationScope::call && key.call_id.empty()) {
        throw InvalidArgument("isolation scope `call` needs the key to name the tool call");
    }
    for (const auto& [label, value] : spec->labels) {
        if (is_identity_label(label) || label == kAcquireLabel) {
            throw InvalidArgument(
                fmt::format("reserved sandbox label '{}' in the spec; rename it", label));
        }
    }
    // What the declarations do not cover (method-scoped egress, unrestricted egress, withheld
    // capabilities, limits) is refused here as the router refuses it.
    ensure_declared(spec, name(), declarations());
    const bool storage = needs_storage(spec);
    const auto base = storage_base(spec);
    const auto wanted_egress = egress_of(spec);
    AcquireTicket ticket(state, {key.scope, key.thread_id});
    const SlotKey slot{key, spec->kind};
    auto guard = co_await state->lock_for(slot)->lock();

    AcasCredentialRequest credential_request;
    credential_request.operation = AcasOperation::acquire;
    credential_request.scope = key.scope;
    credential_request.thread_id = key.thread_id;
    credential_request.key = key;
    auto binding = co_await state->resolve(std::move(credential_request));
    auto lease = co_await state->lease(binding);
    auto& client = lease.client();

    // Retained deletions for this key and kind must succeed before anything new is handed out.
    std::set<std::string> retained;
    {
        std::lock_guard lock(state->mutex);
        if (auto found = state->retained.find(slot); found != state->retained.end())
            retained = found->second;
    }
    for (const auto& id : retained) {
        const auto failure = co_await state->delete_and_wait(
            client, id, std::min(Seconds{30.0}, config.delete_timeout));
        std::lock_guard lock(state->mutex);
        if (!failure) {
            state->retained[slot].erase(id);
            if (state->retained[slot].empty())
                state->retained.erase(slot);
        }
    }
    {
        std::lock_guard lock(state->mutex);
        if (state->retained.count(slot)) {
            throw SandboxOutputError(
                "an earlier sandbox of this key and kind could not be deleted yet; retry the "
                "acquire (or dispose) once the service answers");
        }
    }

    std::shared_ptr<HeldSandbox> held;
    {
        std::lock_guard lock(state->mutex);
        if (auto found = state->held.find(slot); found != state->held.end())
            held = found->second;
    }
    if (held) {
        if (held->egress != wanted_egress) {
            throw AcasEgressPolicyConflict(fmt::format(
                "the warm sandbox of this key and kind was created with egress {} and the spec "
                "asks "
                "for {}; the original is kept. Dispose the kind (and require success) before "
                "changing policy, or use another key",
                describe(held->egress), describe(wanted_egress)));
        }
        if (held->base != base) {
            throw InvalidArgument(fmt::format(
                "the warm sandbox uses the storage base {}; a held sandbox cannot change it to {}",
                held->base, base));
        }
        try {
            co_await client.ensure_running(held->id, config.poll_interval,
                                           deadline_after(config.resume_timeout));
            state->log->info("sandbox reused: {}", held->id);
        } catch (const AcasServiceError& e) {
            if (e.status() != 404) {
                state->log->info("resuming sandbox {} failed: {}", held->id, e.what());
                throw SandboxOutputError(
                    "the held sandbox could not be resumed; dispose the kind and acquire again");
            }
            std::lock_guard lock(state->mutex);
            state->held.erase(slot);
            held.reset();
        }
    }
    // Set when this acquire's own create lost the race for the key to another process's sandbox.
    std::optional<SandboxInfo> redirect;
    if (!held && spec->isolation_scope != IsolationScope::call) {
        // Get-or-create across processes: the service's labels find a sandbox another process made.
        // Duplicates an earlier race left are resolved here by the same rule every replica uses.
        const auto found =
            co_await key_holders(client, key, spec->kind, deadline_after(config.client_wait));
        if (const auto winner = convergence::winner(found)) {
            co_await dispose_losers(*state, client, found, winner->id, "",
                                    deadline_after(config.client_wait));
            redirect = winner;
        }
    }
    bool fresh = false;
    std::string nonce;
    std::string image;
    if (!held && !redirect) {
        auto request =
            co_await image_source(*state, client, spec, deadline_after(config.client_wait));
        image = source_key(request);
        if (refused_by_removal(spec) && state->image_hint_refuses(image)) {
            throw SandboxCapabilityNotSupported(fmt::format(
                "a sandbox of image {} could not remove a file the file plane wrote within the "
                "last {:.0f} s, so files_out, host_tools and files_delete are withdrawn for it; "
                "nothing was created. Fix the image (or run as root) and acquire again after the "
                "hint expires",
                image, config.image_hint.count()));
        }
        request.labels = sandbox_labels(key, spec);
        nonce = random_hex(12);
        request.labels[kAcquireLabel] = nonce;
        for (const auto& host : wanted_egress.hosts)
            request.allow_hosts.push_back(host);
        request.auto_suspend_seconds = config.auto_suspend_seconds;
        fresh = true;
        std::exception_ptr failure;
        try {
            const auto deadline = deadline_after(config.create_timeout);
            const auto info = co_await client.create_sandbox(request, deadline);
            held = std::make_shared<HeldSandbox>();
            held->id = info.id;
            held->key = key;
            held->kind = spec->kind;
            held->base = base;
            held->image = image;
            held->egress = wanted_egress;
            held->binding = binding;
            {
                // Registered before configuring, so a purge or dispose can reach it.
                std::lock_guard lock(state->mutex);
                state->held[slot] = held;
            }
            state->log->info("sandbox created: {} (image {})", info.id,
                             request.prebuilt_name.value_or(request.disk_image_id.value_or("?")));
            if (spec->isolation_scope != IsolationScope::call) {
                // Converge before anything runs in it: nothing is written to a loser.
                std::set<std::string> listed;
                auto holders = co_await key_holders(client, key, spec->kind,
                                                    deadline_after(config.client_wait), &listed);
                if (!listed.count(info.id))
                    holders.push_back(info);  // created, not listed yet: it still competes
                const auto winner = convergence::winner(holders);
                if (!winner) {
                    // Ours listed as Deleting and no other holder: a purge or dispose of the key
                    // ran meanwhile. What was made is removed below.
                    throw SandboxOutputError(
                        "the key's sandboxes were being deleted while this acquire created one; "
                        "acquire again");
                }
                co_await dispose_losers(*state, client, holders, winner->id, info.id,
                                        deadline_after(config.client_wait));
                if (winner->id != info.id) {
                    state->log->info("sandbox {} lost the race for its key to {}; disposing it",
                                     info.id, winner->id);
                    {
                        std::lock_guard lock(state->mutex);
                        if (state->held[slot] == held)
                            state->held.erase(slot);
                    }
                    const auto own = held->id;
                    held.reset();
                    fresh = false;
                    redirect = winner;
                    // Not waited for: Deleting no longer holds the key. Kept for retry on
                    // failure, so this key's next acquire in this process deletes it first.
                    bool deleted = false;
                    try {
                        co_await client.delete_sandbox(own, deadline_after(config.client_wait));
                        deleted = true;
                    } catch (const boost::system::system_error&) {
                        throw;
                    } catch (const std::exception& e) {
                        state->log->warn("disposing the losing sandbox {} failed: {}", own,
                                         e.what());
                    }
                    if (!deleted) {
                        std::lock_guard lock(state->mutex);
                        state->retained[slot].insert(own);
                    }
                }
            }
            if (held) {
                co_await client.wait_until_running(info.id, config.poll_interval, deadline);
                // Never leave a sandbox billable without its lifecycle policy.
                co_await client.set_lifecycle(
                    info.id,
                    LifecyclePolicy{config.auto_suspend_seconds, config.auto_delete_seconds},
                    deadline_after(config.client_wait));
            }
        } catch (...) {
            failure = std::current_exception();
        }
        if (failure) {
            co_await asio::this_coro::reset_cancellation_state();
            state->log->warn("acquire failed while creating a sandbox; removing what it made");
            {
                std::lock_guard lock(state->mutex);
                if (held && state->held[slot] == held)
                    state->held.erase(slot);
            }
            // Found by the acquire nonce: also reaches a sandbox whose create answer was lost.
            std::set<std::string> ids;
            if (held)
                ids.insert(held->id);
            std::map<std::string, std::string> nonce_selector;
            nonce_selector[kAcquireLabel] = nonce;
            try {
                for (const auto& info : co_await client.list_sandboxes(
                         nonce_selector, deadline_after(Seconds{30.0}))) {
                    ids.insert(info.id);
                }
            } catch (const std::exception& e) {
                state->log->warn("listing the orphans of a failed acquire failed: {}", e.what());
            }
            for (const auto& id : ids) {
                const auto orphan_failure = co_await state->delete_and_wait(
                    client, id, std::min(Seconds{60.0}, config.delete_timeout));
                if (orphan_failure) {
                    std::lock_guard lock(state->mutex);
                    state->retained[slot].insert(id);
                }
            }
            std::rethrow_exception(failure);
        }
    }
    if (!held && redirect) {
        {
            const auto& info = *redirect;
            const auto existing = egress_of(info);
            if (existing != wanted_egress) {
                throw AcasEgressPolicyConflict(fmt::format(
                    "the live sandbox {} of this key and kind was created with egress {} and the "
                    "spec asks for {}; the original is kept. Dispose the kind before changing "
                    "policy",
                    info.id, describe(existing), describe(wanted_egress)));
            }
            auto adopted = std::make_shared<HeldSandbox>();
            adopted->id = info.id;
            adopted->key = key;
            adopted->kind = spec->kind;
            adopted->base = base;
            adopted->egress = existing;
            adopted->binding = binding;
            co_await client.ensure_running(info.id, config.poll_interval,
                                           deadline_after(config.resume_timeout));
            std::lock_guard lock(state->mutex);
            state->held[slot] = adopted;
            held = adopted;
            state->log->info("sandbox reused from the service: {}", info.id);
        }
    }
    std::exception_ptr failure;
    try {
        const auto probe_deadline = deadline_after(config.probe_timeout);
        co_await probes::run_acquire_probes(*state, client, held, spec, probe_deadline);
        if (storage) {
            co_await probes::ensure_storage_base(*state, client, held,
                                                 deadline_after(config.read_timeout));
        }
    } catch (...) {
        failure = std::current_exception();
    }
    if (failure) {
        if (fresh || is_cancellation(failure)) {
            co_await asio::this_coro::reset_cancellation_state();
            if (fresh)
                co_await state->invalidate(held, "acquire could not prepare it");
        }
        std::rethrow_exception(failure);
    }
    if (held->invalidated) {
        throw SandboxOutputError("the sandbox was invalidated during acquire; retry the acquire");
    }
    auto handle = std::make_shared<AcasSandbox>(state, held);
    held->handed_out = true;
    {
        std::lock_guard lock(state->mutex);
        if (auto found = state->replaced.find(slot); found != state->replaced.end()) {
            if (found->second.previous_id != held->id)
                handle->mark_replaced(found->second);
            state->replaced.erase(found);
        }
    }
    co_return handle;
}

Task<std::optional<DisposalFailure>> AcasBackend::dispose(SandboxKey key,
                                                          std::optional<std::string> kind) {
    auto state = state_;
    State::Operation operation(state);
    std::vector<std::optional<DisposalFailure>> failures;
    std::map<std::string, std::string> ids;  // id -> kind for retention
    {
        std::lock_guard lock(state->mutex);
        for (auto it = state->held.begin(); it != state->held.end();) {
            if (it->first.first == key && (!kind || it->first.second == *kind)) {
                ids[it->second->id] = it->first.second;
                it = state->held.erase(it);
            } else {
                ++it;
            }
        }
        for (auto it = state->retained.begin(); it != state->retained.end();) {
            if (it->first.first == key && (!kind || it->first.second == *kind)) {
                for (const auto& id : it->second)
                    ids[id] = it->first.second;
                it = state->retained.erase(it);
            } else {
                ++it;
            }
        }
        // The caller discards the state itself: nothing is left to report.
        std::erase_if(state->replaced, [&](const auto& entry) {
            return entry.first.first == key && (!kind || entry.first.second == *kind);
        });
    }
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
                std::lock_guard lock(state->mutex);
                state->retained[{key, sandbox_kind}].insert(id);
            }
            failures.push_back(std::move(failure));
        }
    } catch (const boost::system::system_error&) {
        throw;
    } catch (const std::exception& e) {
        std::lock_guard lock(state->mutex);
        for (const auto& [id, sandbox_kind] : ids)
            state->retained[{key, sandbox_kind}].insert(id);
        failures.push_back(DisposalFailure{DisposalCode::unreachable, e.what()});
    }
    co_return fold_disposal_failures(failures);
}

Task<ScopePurge> AcasBackend::dispose_scope(std::string scope, std::string thread_id) {
    auto state = state_;
    State::Operation operation(state);
    const std::pair<std::string, std::string> conversation{scope, thread_id};
    {
        std::lock_guard lock(state->mutex);
        if (state->acquiring.count(conversation)) {
            co_return ScopePurge{0, DisposalFailure{DisposalCode::unknown,
                                                    "an acquire for this conversation is active; "
                                                    "retry the purge after it finishes"}};
        }
        ++state->purging[conversation];
    }
    PurgeTicket ticket(state, conversation);
    std::map<std::string, SlotKey> ids;
    {
        std::lock_guard lock(state->mutex);
        for (auto it = state->held.begin(); it != state->held.end();) {
            if (it->first.first.scope == scope && it->first.first.thread_id == thread_id) {
                ids.emplace(it->second->id, it->first);
                it = state->held.erase(it);
            } else {
                ++it;
            }
        }
        for (auto it = state->retained.begin(); it != state->retained.end();) {
            if (it->first.first.scope == scope && it->first.first.thread_id == thread_id) {
                for (const auto& id : it->second)
                    ids.emplace(id, it->first);
                it = state->retained.erase(it);
            } else {
                ++it;
            }
        }
    }
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
                std::lock_guard lock(state->mutex);
                state->retained[slot].insert(id);
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
    {
        std::lock_guard lock(state->mutex);
        state->closed = true;
    }
    auto executor = co_await asio::this_coro::executor;
    asio::steady_timer pause(executor);
    const auto give_up = deadline_after(state->config.client_close);
    int still_running = 0;
    for (;;) {
        {
            std::lock_guard lock(state->mutex);
            still_running = state->active;
        }
        if (still_running == 0 || SteadyClock::now() >= give_up)
            break;
        pause.expires_after(std::chrono::milliseconds(10));
        co_await pause.async_wait(asio::use_awaitable);
    }
    std::vector<std::shared_ptr<State::PoolEntry>> entries;
    {
        std::lock_guard lock(state->mutex);
        for (const auto& entry : state->pool)
            state->requests_of_closed_clients += entry->client->stats().requests;
        entries.swap(state->pool);
    }
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
    for (auto& entry : entries) {
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
