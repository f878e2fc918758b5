// LocalBackend: get-or-create through the on-disk registry, serialised per key and kind by an
// in-process mutex plus the registry's cross-process flock.
#include "maf_sandbox/local/local_backend.hpp"

#include <spdlog/spdlog.h>
#include <algorithm>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/thread_pool.hpp>
#include <mutex>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "local_sandbox.hpp"
#include "maf_sandbox/core/capacity_error.hpp"
#include "maf_sandbox/core/declarations_check.hpp"
#include "maf_sandbox/core/errors.hpp"
#include "maf_sandbox/core/labels.hpp"
#include "maf_sandbox/core/off_loop.hpp"
#include "maf_sandbox/core/run_blocking.hpp"
#include "maf_sandbox/local/warm_lookup.hpp"
#include "maf_sandbox/runtime/host/gc.hpp"
#include "maf_sandbox/runtime/host/images.hpp"
#include "maf_sandbox/runtime/host/sandbox_process.hpp"
#include "maf_sandbox/runtime/wire/registry.hpp"
#include "sandbox_pool.hpp"

namespace maf_sandbox::local {

namespace fs = std::filesystem;
using runtime::Registry;
using runtime::SandboxRecord;

namespace {

bool alive(const SandboxRecord& record) {
    return record_alive(record);
}

std::string describe(const runtime::EgressPolicy& policy) {
    if (policy.mode != Egress::allowlist) {
        return fmt::format("'{}'", to_string(policy.mode));
    }
    return fmt::format("'allowlist' [{}]", fmt::join(policy.allow, ", "));
}

}  // namespace

// (perf) How long after a take the pool's refill starts.
constexpr std::chrono::milliseconds kPoolRefillDelay{30};

struct LocalBackend::Impl {
    LocalBackendConfig config;
    Registry registry;
    runtime::ImageStore images;
    std::shared_ptr<boost::asio::thread_pool> pool = std::make_shared<boost::asio::thread_pool>(4);
    std::mutex locks_mutex;
    std::map<std::string, std::shared_ptr<std::mutex>> locks;
    bool closed = false;
    // Checked once, at construction: what declarations() promises is what create() enforces.
    std::vector<Egress> egress_modes = runtime::enforceable_egress_modes();
    // (perf) Pre-built sandboxes (sandbox_pool.hpp); off unless config.pool_size > 0.
    SandboxPool sandbox_pool{registry, config.pool_size};

    explicit Impl(LocalBackendConfig c)
        : config(std::move(c)),
          registry(config.state_dir.empty() ? runtime::default_state_dir() : config.state_dir),
          images(registry.state_dir()) {}

    bool enforces(Egress mode) const {
        return std::find(egress_modes.begin(), egress_modes.end(), mode) != egress_modes.end();
    }

    std::shared_ptr<std::mutex> key_mutex(const std::string& key) {
        std::lock_guard guard(locks_mutex);
        auto& slot = locks[key];
        if (!slot) {
            slot = std::make_shared<std::mutex>();
        }
        return slot;
    }

    // Tears one sandbox down and forgets it. Never throws; returns why it failed.
    std::optional<std::string> destroy(const SandboxRecord& record) {
        return destroy_recorded(registry, record);
    }

    // A warm sandbox this owning backend reuses names it as a co-owner (runtime/wire/owner.hpp):
    // the sandbox then ends with the last of its owners, whoever made it, and never while one
    // still runs. Called under the key's cross-process lock. Throws SandboxCapacityExceeded when
    // the sandbox has as many live owners as a record holds.
    void take_part_ownership(SandboxRecord& record, const runtime::SandboxOwner& owner) {
        const auto before = runtime::recorded_owners(record);
        if (!runtime::add_recorded_owner(record, owner)) {
            throw SandboxCapacityExceeded(fmt::format(
                "sandbox {} is already used by {} live front ends, as many as it records; end one "
                "of them or use another key",
                record.id, runtime::kMaxOwners));
        }
        if (runtime::recorded_owners(record) != before) {
            registry.update(record);
        }
    }

    // A disposal by an owning backend of a sandbox another live front end co-owns only gives up
    // this process's part: the sandbox stays for the other. Otherwise it is destroyed. Taken
    // under the key's cross-process lock, so that no acquire adds an owner in between.
    std::optional<std::string> release_or_destroy(const SandboxRecord& listed) {
        if (!config.owned_by_this_process) {
            return destroy(listed);
        }
        try {
            const auto cross_process = registry.lock(acquire_lock_name(listed.labels));
            auto record = registry.get(listed.id);
            if (!record) {
                return std::nullopt;  // gone meanwhile
            }
            if (runtime::remove_recorded_owner(*record, runtime::current_process_as_owner()) > 0) {
                registry.update(*record);
                return std::nullopt;
            }
            return destroy(*record);
        } catch (const std::exception& e) {
            return std::string(e.what());
        }
    }

    std::shared_ptr<Sandbox> wrap(const runtime::SandboxHandle& handle,
                                  const std::string& work_dir) {
        return std::make_shared<LocalSandbox>(handle, work_dir, config.transfer_limits,
                                              config.default_max_output_bytes, pool);
    }

    std::shared_ptr<Sandbox> acquire_blocking(const SandboxKey& key, const SandboxSpec& spec) {
        const auto labels = sandbox_labels(key, spec);
        const bool per_call = spec->isolation_scope == IsolationScope::call;
        // A call's sandbox is disposed by the call's own process at its end; should that process
        // end first (killed by any signal), the sandbox goes with it (runtime/wire/owner.hpp).
        const auto owner = per_call || config.owned_by_this_process
                               ? std::optional(runtime::current_process_as_owner())
                               : std::nullopt;
        const auto mutex = key_mutex(acquire_lock_name(labels));
        std::lock_guard in_process(*mutex);
        const auto cross_process = registry.lock(acquire_lock_name(labels));
        const std::string work_dir = spec.work_dir_or_default();
        const std::string image = spec->image.value_or(config.default_image);

        std::vector<std::string> lost;
        if (!per_call) {
            if (auto record = find_warm(registry, labels, &lost)) {
                const auto held = held_egress_policy(*record);
                const auto wanted = runtime::EgressPolicy::make(spec->egress, spec->egress_allow);
                if (held != wanted) {
                    throw EgressPolicyConflict(fmt::format(
                        "the live sandbox for this key and kind was created with egress {}, not "
                        "{}; it is kept as it is: dispose it first or ask for the same egress",
                        describe(held), describe(wanted)));
                }
                if (owner) {
                    take_part_ownership(*record, *owner);
                }
                note_use(registry, *record);
                const auto work = record->runtime.if_contains("work_dir");
                return wrap(*handle_of(*record), work ? std::string(work->as_string()) : work_dir);
            }
        }
        auto made = take_pooled(labels, spec, image, work_dir, owner);
        if (!made) {
            made = create(labels, spec, image, work_dir, owner);
        }
        if (!lost.empty()) {
            // Found in the on-disk registry, so any process's next acquire of the key says so.
            made->mark_replaced(SandboxReplacement{
                lost.front(),
                fmt::format("the supervisor of sandbox {} had died (killed or crashed) before "
                            "its lifecycle expired; its files and processes are gone",
                            lost.front())});
        }
        return made;
    }

    // (perf) A sandbox built ahead for the same image, work directory and limits (closed egress
    // only), relabelled for this key; the pool is topped up on the thread pool either way.
    std::shared_ptr<Sandbox> take_pooled(const std::map<std::string, std::string>& labels,
                                         const SandboxSpec& spec, const std::string& image,
                                         const std::string& work_dir,
                                         const std::optional<runtime::SandboxOwner>& owner) {
        if (!sandbox_pool.enabled() || spec->egress != Egress::closed ||
            !spec->egress_allow.empty()) {
            return nullptr;
        }
        const auto signature = pool_signature(image, work_dir);
        auto record = sandbox_pool.take(signature, labels, owner);
        refill_pool(signature, spec, image, work_dir);
        if (!record) {
            return nullptr;
        }
        return wrap(*handle_of(*record), work_dir);
    }

    std::string pool_signature(const std::string& image, const std::string& work_dir) const {
        return SandboxPool::signature(
            {image, work_dir, std::to_string(config.memory_bytes), std::to_string(config.pids),
             std::to_string(config.cpus), std::to_string(config.disk_bytes),
             std::to_string(config.tmp_bytes), config.root_inside ? "root" : "user",
             std::to_string(config.idle_timeout ? config.idle_timeout->count() : -1),
             std::to_string(config.max_lifetime ? config.max_lifetime->count() : -1)});
    }

    // Safe to capture `this`: ~LocalBackend joins the thread pool before Impl can go away.
    void refill_pool(const std::string& signature, const SandboxSpec& spec,
                     const std::string& image, const std::string& work_dir) {
        for (std::size_t n = sandbox_pool.claim_refills(signature); n > 0; --n) {
            // Started a little later, so the launch does not compete for the CPU with the
            // caller's first exec in the sandbox it just took.
            auto timer = std::make_shared<boost::asio::steady_timer>(*pool, kPoolRefillDelay);
            timer->async_wait([this, timer, signature, spec, image, work_dir](auto) {
                try {
                    const auto made =
                        create(SandboxPool::pool_labels(signature), spec, image, work_dir);
                    // The sandbox directory is named by the record's id.
                    const auto* local = dynamic_cast<const LocalSandbox*>(made.get());
                    sandbox_pool.created(
                        signature, local ? local->handle().sandbox_dir.filename().string() : "");
                } catch (const std::exception& e) {
                    spdlog::warn("refilling the local sandbox pool failed: {}", e.what());
                    sandbox_pool.refill_failed(signature);
                }
            });
        }
    }

    // Destroys the pooled sandboxes this process made and nobody took.
    void drain_pool() {
        if (!sandbox_pool.enabled()) {
            return;
        }
        sandbox_pool.wait_idle();
        for (const auto& id : sandbox_pool.made_here()) {
            if (auto record = registry.get(id); record && record->labels.count(kPoolLabel) > 0) {
                destroy(*record);
            }
        }
    }

    std::shared_ptr<Sandbox> create(const std::map<std::string, std::string>& labels,
                                    const SandboxSpec& spec, const std::string& image,
                                    const std::string& work_dir,
                                    const std::optional<runtime::SandboxOwner>& owner = {}) {
        if (!enforces(spec->egress)) {
            throw SandboxEgressNotEnforced(fmt::format(
                "the local backend cannot enforce egress '{}' on this host ({}); use egress "
                "closed or allowlist",
                to_string(spec->egress), runtime::egress_unavailable_reason(spec->egress)));
        }
        const auto policy = runtime::EgressPolicy::make(spec->egress, spec->egress_allow);
        if (policy.mode == Egress::allowlist) {
            runtime::compile_allowlist(policy.allow);  // a malformed entry: before anything exists
        }
        const runtime::MountPlan plan =
            images.resolve(image);  // unknown image: before anything exists
        SandboxRecord record;
        record.id = Registry::new_id();
        record.labels = labels;
        record.image = plan.image;
        record.egress = policy.mode;
        record.egress_allow = policy.allow;
        record.limits = {config.memory_bytes, config.pids, config.cpus, config.disk_bytes};
        record.created_at = record.last_used_at = runtime::Clock::now();
        record.lifecycle = {config.idle_timeout, config.max_lifetime};
        record.state = runtime::SandboxState::creating;
        if (owner) {
            runtime::set_recorded_owner(record, *owner);  // gc's evidence from the first write
        }
        registry.create(record);
        try {
            runtime::SandboxLaunch launch;
            launch.id = record.id;
            launch.sandbox_dir = registry.sandbox_dir(record.id);
            launch.mounts = runtime::root_plan_for(plan, {work_dir});
            launch.mounts.disk_bytes = config.disk_bytes;
            launch.mounts.layer_mount_point = registry.layer_mount_point();
            launch.mounts.tmp_bytes = config.tmp_bytes;
            launch.guest_uid = config.root_inside ? 0 : plan.uid;
            launch.guest_gid = config.root_inside ? 0 : plan.gid;
            launch.env.assign(plan.env.begin(), plan.env.end());
            launch.default_cwd = work_dir;
            launch.limits = {config.memory_bytes, config.pids, config.cpus};
            launch.idle_timeout = config.idle_timeout;
            launch.max_lifetime = config.max_lifetime;
            launch.egress = policy;
            launch.egress_operator = config.egress_operator;
            launch.owner = owner;
            // A conversation's sandbox made without an owner is still watched for one: a front
            // end that reuses it later (an MCP server) records itself, and it ends with that one.
            launch.watch_later_owners = !owner;
            if (labels.count(kPoolLabel) > 0) {
                launch.owner_pending_label = kPoolLabel;  // a run that takes it names its owner
            }
            launch.id_pool = config.id_pool;
            launch.id_claims_dir = config.id_claims_dir;
            launch.budgets = config.budgets;
            // Recorded as running while the sandbox's PID 1 finishes its set-up.
            launch.on_started = [&](const runtime::SandboxHandle& started) {
                record.supervisor = {started.pid, started.start_time};
                record.host_ids = SandboxRecord::HostIds{started.ids.host_base, started.ids.count,
                                                         started.id_claims_dir};
                record.runtime = started.runtime_json();
                record.runtime["work_dir"] = work_dir;
                record.runtime["egress_policy"] = policy.to_json();
                if (owner) {
                    runtime::set_recorded_owner(record, *owner);
                }
                record.state = runtime::SandboxState::running;
                registry.update(record);
            };
            const auto handle = runtime::launch_sandbox(launch);
            index_key(registry, labels, record.id);
            return wrap(handle, work_dir);
        } catch (...) {
            if (auto stored = registry.get(record.id)) {
                destroy(*stored);
            }
            registry.remove(record.id);
            throw;
        }
    }

    int purge_matching(const std::function<bool(const SandboxRecord&)>& match,
                       std::vector<std::string>& failures) {
        int count = 0;
        for (const auto& record : registry.list()) {
            if (!match(record)) {
                continue;
            }
            if (auto failure = release_or_destroy(record)) {
                failures.push_back(*failure);
            } else {
                ++count;
            }
        }
        return count;
    }
};

LocalBackend::LocalBackend(LocalBackendConfig config)
    : impl_(std::make_shared<Impl>(std::move(config))) {}

LocalBackend::~LocalBackend() {
    if (impl_ && impl_->pool) {
        impl_->drain_pool();  // (perf) waits for refills in flight, then removes unused ones
        impl_->pool->join();
    }
}

void LocalBackend::wait_for_pool() const {
    impl_->sandbox_pool.wait_idle();
}

std::string LocalBackend::pool_signature(const std::string& image) const {
    SandboxSpecFields fields;
    fields.kind = "pool";
    return impl_->pool_signature(image, SandboxSpec(fields).work_dir_or_default());
}

std::size_t LocalBackend::fill_shared_pool(std::size_t size, const std::string& image) {
    SandboxSpecFields fields;
    fields.kind = "pool";
    fields.image = image;
    const SandboxSpec spec(fields);
    const std::string work_dir = spec.work_dir_or_default();
    const auto signature = impl_->pool_signature(image, work_dir);
    const auto filler = impl_->registry.try_lock(std::string(kPoolLabel) + "-fill:" + signature);
    if (!filler.held()) {
        return 0;
    }
    const runtime::LabelSelector selector(SandboxPool::pool_labels(signature));
    std::size_t made = 0;
    for (;;) {
        std::size_t pooled = 0;
        for (const auto& record : impl_->registry.list(selector)) {
            pooled += alive(record) ? 1 : 0;
        }
        if (pooled >= size) {
            return made;
        }
        impl_->create(SandboxPool::pool_labels(signature), spec, image, work_dir);
        ++made;
    }
}

std::size_t LocalBackend::drain_shared_pool() {
    std::size_t drained = 0;
    for (const auto& record : impl_->registry.list()) {
        const auto it = record.labels.find(kPoolLabel);
        if (it == record.labels.end()) {
            continue;
        }
        // Under the takers' lock, so a sandbox being taken right now is not destroyed under them.
        const auto lock = impl_->registry.lock(std::string(kPoolLabel) + ":" + it->second);
        const auto current = impl_->registry.get(record.id);
        if (current && current->labels.count(kPoolLabel) > 0 && !impl_->destroy(*current)) {
            ++drained;
        }
    }
    return drained;
}

const fs::path& LocalBackend::state_dir() const noexcept {
    return impl_->registry.state_dir();
}

BackendDeclarations LocalBackend::declarations() const {
    BackendDeclarations declarations;
    declarations.capabilities = {
        Capability::exec,       Capability::files_in,       Capability::files_out,
        Capability::files_list, Capability::files_delete,   Capability::reclaim,
        Capability::host_tools, Capability::streaming_exec, Capability::terminal};
    declarations.limits =
        SandboxLimits{impl_->config.transfer_limits, impl_->config.transfer_limits};
    declarations.egress_modes = {impl_->egress_modes.begin(), impl_->egress_modes.end()};
    declarations.os_families = {OsFamily::posix};
    declarations.isolation_scopes = {IsolationScope::conversation, IsolationScope::call};
    return declarations;
}

// The public methods are plain functions returning the pool-side task (not coroutines): GCC 12
// miscompiles init-captures of coroutine parameters.
Task<std::shared_ptr<Sandbox>> LocalBackend::acquire(SandboxKey key, SandboxSpec spec) {
    if (impl_->closed) {
        throw Error("the local backend is closed; create a new one");
    }
    // A direct caller is refused what the router would refuse it (what this backend does not
    // declare), before any sandbox is looked up or made.
    ensure_declared(spec, name(), declarations());
    auto impl = impl_;
    return off_loop(*impl->pool, [impl, key, spec] { return impl->acquire_blocking(key, spec); });
}

Task<std::optional<DisposalFailure>> LocalBackend::dispose(SandboxKey key,
                                                           std::optional<std::string> kind) {
    auto impl = impl_;
    return off_loop(*impl->pool, [impl, key, kind]() -> std::optional<DisposalFailure> {
        try {
            std::vector<std::string> failures;
            impl->purge_matching(
                [&](const SandboxRecord& record) {
                    return labels_match_key(record.labels, key, kind);
                },
                failures);
            if (failures.empty()) {
                return std::nullopt;
            }
            return DisposalFailure{DisposalCode::unknown,
                                   fmt::format("{}", fmt::join(failures, "; "))};
        } catch (const std::exception& e) {
            return DisposalFailure{DisposalCode::unreachable, e.what()};
        }
    });
}

Task<ScopePurge> LocalBackend::dispose_scope(std::string scope, std::string thread_id) {
    auto impl = impl_;
    return off_loop(*impl->pool, [impl, scope, thread_id]() -> ScopePurge {
        ScopePurge purge;
        try {
            const auto selector = scope_selector(scope, thread_id);
            std::vector<std::string> failures;
            purge.disposed = impl->purge_matching(
                [&](const SandboxRecord& record) {
                    for (const auto& [name, value] : selector) {
                        const auto it = record.labels.find(name);
                        if (it == record.labels.end() || it->second != value) {
                            return false;
                        }
                    }
                    return true;
                },
                failures);
            if (!failures.empty()) {
                purge.undisposed = DisposalFailure{DisposalCode::unknown,
                                                   fmt::format("{}", fmt::join(failures, "; "))};
            }
        } catch (const std::exception& e) {
            purge.undisposed = DisposalFailure{DisposalCode::unreachable, e.what()};
        }
        return purge;
    });
}

Task<void> LocalBackend::close() {
    impl_->closed = true;
    co_return;
}

std::vector<LocalSandboxInfo> LocalBackend::list(const std::vector<std::string>& selector) const {
    const auto records = selector.empty()
                             ? impl_->registry.list()
                             : impl_->registry.list(runtime::LabelSelector::parse(selector));
    std::vector<LocalSandboxInfo> out;
    for (const auto& record : records) {
        out.push_back({record.id, record.labels, record.image,
                       alive(record) ? std::string(runtime::to_string(record.state)) : "dead"});
    }
    return out;
}

std::vector<runtime::EgressDecision> LocalBackend::egress_decisions(const std::string& id) const {
    Registry::validate_id(id);
    if (!impl_->registry.get(id)) {
        throw InvalidArgument(
            fmt::format("there is no local sandbox {} (its egress log goes with it); list them "
                        "with `maf-sandbox ls`",
                        id));
    }
    return runtime::read_egress_decisions(
        runtime::egress_log_path(impl_->registry.sandbox_dir(id)));
}

bool LocalBackend::remove(const std::string& id) {
    Registry::validate_id(id);
    const auto record = impl_->registry.get(id);
    if (!record) {
        return false;
    }
    if (const auto failure = impl_->destroy(*record)) {
        throw Error(fmt::format("could not fully remove sandbox {}: {}; run `maf-sandbox gc` later",
                                id, *failure));
    }
    return true;
}

std::shared_ptr<Sandbox> LocalBackend::open(const std::string& id) {
    Registry::validate_id(id);
    auto record = impl_->registry.get(id);
    const auto handle = record ? handle_of(*record) : std::nullopt;
    if (!handle || record->labels.count(kPoolLabel) > 0 || !runtime::sandbox_alive(*handle)) {
        throw InvalidArgument(
            fmt::format("there is no live local sandbox {}; list them with `maf-sandbox ls`", id));
    }
    note_use(impl_->registry, *record);
    const auto* work = record->runtime.if_contains("work_dir");
    SandboxSpecFields fields;
    fields.kind = "shell";
    return impl_->wrap(*handle, work != nullptr ? std::string(work->as_string())
                                                : SandboxSpec(fields).work_dir_or_default());
}

int LocalBackend::purge(const std::string& scope, const std::string& thread_id) {
    const auto result = run_blocking(dispose_scope(scope, thread_id));
    if (result.undisposed) {
        throw Error(fmt::format("{} sandboxes removed, some could not be: {}", result.disposed,
                                result.undisposed->detail));
    }
    return result.disposed;
}

}  // namespace maf_sandbox::local
