#include "maf_sandbox/local/warm_lookup.hpp"

#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <csignal>

#include <fmt/format.h>

#include "maf_sandbox/core/errors.hpp"
#include "maf_sandbox/core/labels.hpp"
#include "maf_sandbox/runtime/host/gc.hpp"
#include "maf_sandbox/runtime/host/recorded_handle.hpp"
#include "sandbox_pool.hpp"

namespace maf_sandbox::local {

namespace {

const std::string kCallLabel(identity_label::call);

std::string label_or_empty(const Labels& labels, std::string_view name) {
    const auto it = labels.find(std::string(name));
    return it == labels.end() ? std::string() : it->second;
}

std::filesystem::path index_path(const runtime::Registry& registry, const Labels& labels) {
    return registry.state_dir() / "keys" / SandboxPool::signature({acquire_lock_name(labels)});
}

std::optional<std::string> indexed_id(const runtime::Registry& registry, const Labels& labels) {
    char target[128];
    const auto path = index_path(registry, labels);
    const ssize_t n = ::readlink(path.c_str(), target, sizeof target);
    if (n <= 0 || static_cast<std::size_t>(n) >= sizeof target) {
        return std::nullopt;
    }
    std::string id(target, static_cast<std::size_t>(n));
    return runtime::Registry::is_id(id) ? std::optional<std::string>(id) : std::nullopt;
}

// The live sandbox the index names for these labels, if the index is right.
std::optional<runtime::SandboxRecord> indexed_live(const runtime::Registry& registry,
                                                   const Labels& labels) {
    const auto id = indexed_id(registry, labels);
    if (!id) {
        return std::nullopt;
    }
    auto record = registry.get(*id);
    if (!record || !same_identity(record->labels, labels) || !record_alive(*record)) {
        return std::nullopt;
    }
    return record;
}

}  // namespace

void index_key(const runtime::Registry& registry, const Labels& labels, const std::string& id) {
    if (labels.count(kCallLabel) > 0 || labels.count(kPoolLabel) > 0) {
        return;  // never looked up by key
    }
    const auto path = index_path(registry, labels);
    ::mkdir(path.parent_path().c_str(), 0700);
    const auto temporary = fmt::format("{}.{}.tmp", path.string(), runtime::Registry::new_id());
    // A failure only costs the next lookup a scan.
    if (::symlink(id.c_str(), temporary.c_str()) == 0 &&
        ::rename(temporary.c_str(), path.c_str()) != 0) {
        ::unlink(temporary.c_str());
    }
}

void unindex_key(const runtime::Registry& registry, const Labels& labels, const std::string& id) {
    if (indexed_id(registry, labels) == std::optional<std::string>(id)) {
        ::unlink(index_path(registry, labels).c_str());
    }
}

std::string acquire_lock_name(const Labels& labels) {
    std::string name;
    for (const auto label : kIdentityLabels) {
        name +=
            fmt::format("{}{}={}", name.empty() ? "" : ";", label, label_or_empty(labels, label));
    }
    return name;
}

bool same_identity(const Labels& record_labels, const Labels& wanted) {
    for (const auto name : kIdentityLabels) {
        if (name == identity_label::call) {
            continue;  // optional: compared below
        }
        const auto it = record_labels.find(std::string(name));
        if (it == record_labels.end() || it->second != label_or_empty(wanted, name)) {
            return false;
        }
    }
    const auto call = record_labels.find(kCallLabel);
    const auto wanted_call = wanted.find(kCallLabel);
    if (wanted_call == wanted.end()) {
        return call == record_labels.end();
    }
    return call != record_labels.end() && call->second == wanted_call->second;
}

std::optional<runtime::SandboxHandle> handle_of(const runtime::SandboxRecord& record) {
    if (record.supervisor.pid <= 0 || !record.runtime.contains("cgroup_paths") ||
        !record.runtime.contains("socket")) {
        return std::nullopt;
    }
    auto handle = runtime::SandboxHandle::from_runtime_json(
        record.supervisor.pid, record.supervisor.start_time, record.runtime);
    try {
        // Untrusted input: a handle naming anything but this sandbox's own directory, socket and
        // cgroups is never used (destroy_recorded then cleans up by the id alone).
        runtime::check_recorded_handle(handle, handle.sandbox_dir.parent_path(), record.id);
    } catch (const InvalidArgument&) {
        return std::nullopt;
    }
    return handle;
}

bool record_alive(const runtime::SandboxRecord& record) {
    const auto handle = handle_of(record);
    return handle && runtime::sandbox_alive(*handle);
}

runtime::EgressPolicy held_egress_policy(const runtime::SandboxRecord& record) {
    if (const auto* stored = record.runtime.if_contains("egress_policy")) {
        return runtime::EgressPolicy::from_json(*stored);
    }
    return runtime::EgressPolicy::make(record.egress, record.egress_allow);
}

std::optional<std::string> destroy_recorded(runtime::Registry& registry,
                                            const runtime::SandboxRecord& record) {
    try {
        const auto handle = handle_of(record);
        if (handle && handle->sandbox_dir.parent_path() == registry.state_dir() / "sandboxes") {
            runtime::destroy_sandbox(*handle);
        } else {
            // A create that crashed before the supervisor was recorded: its supervisor may still
            // run in cgroups the record does not name; gc's cleanup finds them by name.
            runtime::remove_recorded_cgroups(record);
            runtime::release_recorded_ids(record);
        }
        unindex_key(registry, record.labels, record.id);
        registry.remove(record.id);
        return std::nullopt;
    } catch (const std::exception& e) {
        return e.what();
    }
}

bool kill_recorded(const runtime::SandboxRecord& record) {
    if (record.supervisor.pid <= 0) {
        return false;
    }
    const runtime::UniqueFd pidfd(
        static_cast<int>(::syscall(SYS_pidfd_open, record.supervisor.pid, 0)));
    // Checked after the pidfd is held: a pid reused in between no longer matches its start time.
    if (!pidfd ||
        runtime::live_process_start_time(record.supervisor.pid) !=
            std::optional<std::uint64_t>(record.supervisor.start_time) ||
        !runtime::process_in_sandbox_cgroup(record.supervisor.pid, record.id)) {
        return false;  // gone, reused, or never the sandbox's (a pid in a record is public)
    }
    return ::syscall(SYS_pidfd_send_signal, pidfd.get(), SIGKILL, nullptr, 0) == 0;
}

void note_use(runtime::Registry& registry, runtime::SandboxRecord& record) {
    const auto now = runtime::Clock::now();
    if (now - record.last_used_at < std::chrono::minutes(1) && now >= record.last_used_at) {
        return;
    }
    record.last_used_at = now;
    registry.update(record);
}

std::optional<runtime::SandboxRecord> find_warm(runtime::Registry& registry, const Labels& labels,
                                                std::vector<std::string>* lost) {
    if (auto record = indexed_live(registry, labels)) {
        return record;
    }
    for (auto& record : registry.list()) {
        if (!same_identity(record.labels, labels)) {
            continue;
        }
        if (!record_alive(record)) {
            // An idle timeout or lifetime the spec set is disposal it asked for; a supervisor that
            // died before either (killed, crashed) took state the caller still counts on.
            if (lost && record.state == runtime::SandboxState::running && handle_of(record) &&
                !runtime::lifecycle_expired(record, runtime::Clock::now())) {
                lost->push_back(record.id);
            }
            destroy_recorded(registry, record);  // expired or crashed
            continue;
        }
        index_key(registry, labels, record.id);
        return record;
    }
    return std::nullopt;
}

std::optional<runtime::SandboxRecord> find_live(const runtime::Registry& registry,
                                                const Labels& labels) {
    if (auto record = indexed_live(registry, labels)) {
        return record;
    }
    for (auto& record : registry.list()) {
        if (same_identity(record.labels, labels) && record_alive(record)) {
            index_key(registry, labels, record.id);
            return record;
        }
    }
    return std::nullopt;
}

std::optional<runtime::SandboxRecord> take_pooled(
    runtime::Registry& registry, const std::string& signature, const Labels& labels,
    const std::optional<runtime::SandboxOwner>& owner) {
    const auto lock = registry.lock(std::string(kPoolLabel) + ":" + signature);
    const runtime::LabelSelector selector({{kPoolLabel, signature}});
    for (auto& record : registry.list(selector)) {
        if (record.state != runtime::SandboxState::running) {
            continue;  // still being made by a refill
        }
        if (!record_alive(record)) {
            destroy_recorded(registry, record);  // expired while pooled, or crashed
            continue;
        }
        record.labels = labels;
        record.last_used_at = runtime::Clock::now();
        if (owner) {
            runtime::set_recorded_owner(record, *owner);
        }
        registry.update(record);
        index_key(registry, labels, record.id);
        return record;
    }
    return std::nullopt;
}

}  // namespace maf_sandbox::local
