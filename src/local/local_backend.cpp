// LocalBackend: get-or-create through the on-disk registry, serialised per key and kind by an
// in-process mutex plus the registry's cross-process flock.
#include "maf_sandbox/local/local_backend.hpp"

#include <spdlog/spdlog.h>
#include <boost/asio/thread_pool.hpp>
#include <mutex>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "local_sandbox.hpp"
#include "maf_sandbox/core/errors.hpp"
#include "maf_sandbox/core/labels.hpp"
#include "maf_sandbox/core/run_blocking.hpp"
#include "maf_sandbox/runtime/images.hpp"
#include "maf_sandbox/runtime/registry.hpp"
#include "off_loop.hpp"

namespace maf_sandbox::local {

namespace fs = std::filesystem;
using runtime::Registry;
using runtime::SandboxRecord;

namespace {

constexpr const char* kIdentityLabels[] = {"scope", "thread", "agent", "kind"};

std::optional<runtime::SandboxHandle> handle_of(const SandboxRecord& record) {
    if (record.supervisor.pid <= 0 || !record.runtime.contains("cgroup_paths") ||
        !record.runtime.contains("socket")) {
        return std::nullopt;
    }
    return runtime::SandboxHandle::from_runtime_json(record.supervisor.pid,
                                                     record.supervisor.start_time, record.runtime);
}

bool alive(const SandboxRecord& record) {
    const auto handle = handle_of(record);
    return handle && runtime::sandbox_alive(*handle);
}

}  // namespace

struct LocalBackend::Impl {
    LocalBackendConfig config;
    Registry registry;
    runtime::ImageStore images;
    std::shared_ptr<boost::asio::thread_pool> pool = std::make_shared<boost::asio::thread_pool>(4);
    std::mutex locks_mutex;
    std::map<std::string, std::shared_ptr<std::mutex>> locks;
    bool closed = false;

    explicit Impl(LocalBackendConfig c)
        : config(std::move(c)),
          registry(config.state_dir.empty() ? runtime::default_state_dir() : config.state_dir),
          images(registry.state_dir()) {}

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
        try {
            if (const auto handle = handle_of(record)) {
                runtime::destroy_sandbox(*handle);
            } else if (const auto* paths = record.runtime.if_contains("cgroup_paths")) {
                // A create that crashed before the supervisor was recorded.
                std::vector<fs::path> cgroups;
                for (const auto& path : paths->as_array()) {
                    cgroups.emplace_back(std::string(path.as_string()));
                }
                runtime::SandboxCgroup::attach(runtime::detect_cgroup_layout(), cgroups)->destroy();
            }
            registry.remove(record.id);
            return std::nullopt;
        } catch (const std::exception& e) {
            return e.what();
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
        std::string lock_key;
        for (const char* name : kIdentityLabels) {
            lock_key += fmt::format("{}={};", name, labels.at(name));
        }
        lock_key += fmt::format("call={}", labels.count("call") ? labels.at("call") : "");
        const auto mutex = key_mutex(lock_key);
        std::lock_guard in_process(*mutex);
        const auto cross_process = registry.lock(lock_key);
        const std::string work_dir = spec.work_dir_or_default();
        const std::string image = spec->image.value_or(config.default_image);

        if (!per_call) {
            for (auto& record : registry.list()) {
                bool same = true;
                for (const char* name : kIdentityLabels) {
                    const auto it = record.labels.find(name);
                    same = same && it != record.labels.end() && it->second == labels.at(name);
                }
                const auto call = record.labels.find("call");
                same = same && (labels.count("call") ? call != record.labels.end() &&
                                                           call->second == labels.at("call")
                                                     : call == record.labels.end());
                if (!same) {
                    continue;
                }
                if (!alive(record)) {
                    destroy(record);  // lazy reconcile: expired or crashed
                    continue;
                }
                if (record.egress != spec->egress) {
                    throw EgressPolicyConflict(
                        fmt::format("the live sandbox for this key and kind was created with "
                                    "egress '{}', not '{}'; "
                                    "dispose it first or use the same egress",
                                    to_string(record.egress), to_string(spec->egress)));
                }
                record.last_used_at = runtime::Clock::now();
                registry.update(record);
                const auto work = record.runtime.if_contains("work_dir");
                return wrap(*handle_of(record), work ? std::string(work->as_string()) : work_dir);
            }
        }
        return create(labels, spec, image, work_dir);
    }

    std::shared_ptr<Sandbox> create(const std::map<std::string, std::string>& labels,
                                    const SandboxSpec& spec, const std::string& image,
                                    const std::string& work_dir) {
        if (spec->egress != Egress::closed) {
            throw SandboxEgressNotEnforced(fmt::format(
                "the local backend enforces only closed egress so far, not '{}'; use egress closed",
                to_string(spec->egress)));
        }
        const runtime::MountPlan plan =
            images.resolve(image);  // unknown image: before anything exists
        SandboxRecord record;
        record.id = Registry::new_id();
        record.labels = labels;
        record.image = plan.image;
        record.egress = spec->egress;
        record.limits = {config.memory_bytes, config.pids, config.cpus, config.disk_bytes};
        record.created_at = record.last_used_at = runtime::Clock::now();
        record.lifecycle = {config.idle_timeout, config.max_lifetime};
        record.state = runtime::SandboxState::creating;
        registry.create(record);
        try {
            runtime::SandboxLaunch launch;
            launch.id = record.id;
            launch.sandbox_dir = registry.sandbox_dir(record.id);
            launch.mounts = runtime::root_plan_for(plan, {work_dir});
            launch.mounts.disk_bytes = config.disk_bytes;
            launch.mounts.tmp_bytes = config.tmp_bytes;
            launch.guest_uid = config.root_inside ? 0 : plan.uid;
            launch.guest_gid = config.root_inside ? 0 : plan.gid;
            launch.env.assign(plan.env.begin(), plan.env.end());
            launch.default_cwd = work_dir;
            launch.limits = {config.memory_bytes, config.pids, config.cpus};
            launch.idle_timeout = config.idle_timeout;
            launch.max_lifetime = config.max_lifetime;
            const auto handle = runtime::launch_sandbox(launch);
            record.supervisor = {handle.pid, handle.start_time};
            record.runtime = handle.runtime_json();
            record.runtime["work_dir"] = work_dir;
            record.state = runtime::SandboxState::running;
            registry.update(record);
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
            if (auto failure = destroy(record)) {
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
        impl_->pool->join();
    }
}

const fs::path& LocalBackend::state_dir() const noexcept {
    return impl_->registry.state_dir();
}

BackendDeclarations LocalBackend::declarations() const {
    BackendDeclarations declarations;
    declarations.capabilities = {Capability::exec,         Capability::files_in,
                                 Capability::files_out,    Capability::files_list,
                                 Capability::files_delete, Capability::reclaim,
                                 Capability::host_tools};
    declarations.limits =
        SandboxLimits{impl_->config.transfer_limits, impl_->config.transfer_limits};
    declarations.egress_modes = {Egress::closed};
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
    auto impl = impl_;
    return off_loop(*impl->pool, [impl, key, spec] { return impl->acquire_blocking(key, spec); });
}

Task<std::optional<DisposalFailure>> LocalBackend::dispose(SandboxKey key,
                                                           std::optional<std::string> kind) {
    auto impl = impl_;
    return off_loop(*impl->pool, [impl, key, kind]() -> std::optional<DisposalFailure> {
        try {
            std::map<std::string, std::string> wanted{{"scope", label_value(key.scope)},
                                                      {"thread", label_value(key.thread_id)},
                                                      {"agent", label_value(key.agent_dir)}};
            if (!key.call_id.empty()) {
                wanted["call"] = label_value(key.call_id);
            }
            if (kind) {
                wanted["kind"] = label_value(*kind);
            }
            std::vector<std::string> failures;
            impl->purge_matching(
                [&](const SandboxRecord& record) {
                    for (const auto& [name, value] : wanted) {
                        const auto it = record.labels.find(name);
                        if (it == record.labels.end() || it->second != value) {
                            return false;
                        }
                    }
                    return key.call_id.empty() ? record.labels.count("call") == 0 : true;
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

int LocalBackend::purge(const std::string& scope, const std::string& thread_id) {
    const auto result = run_blocking(dispose_scope(scope, thread_id));
    if (result.undisposed) {
        throw Error(fmt::format("{} sandboxes removed, some could not be: {}", result.disposed,
                                result.undisposed->detail));
    }
    return result.disposed;
}

}  // namespace maf_sandbox::local
