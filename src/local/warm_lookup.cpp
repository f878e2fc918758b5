#include "maf_sandbox/local/warm_lookup.hpp"

#include <sys/syscall.h>
#include <unistd.h>

#include <csignal>

#include <fmt/format.h>

#include "maf_sandbox/runtime/gc.hpp"

namespace maf_sandbox::local {

namespace {

constexpr const char* kIdentityLabels[] = {"scope", "thread", "agent", "kind"};

std::string label_or_empty(const Labels& labels, const char* name) {
    const auto it = labels.find(name);
    return it == labels.end() ? std::string() : it->second;
}

}  // namespace

std::string acquire_lock_name(const Labels& labels) {
    std::string name;
    for (const char* label : kIdentityLabels) {
        name += fmt::format("{}={};", label, label_or_empty(labels, label));
    }
    return name + fmt::format("call={}", label_or_empty(labels, "call"));
}

bool same_identity(const Labels& record_labels, const Labels& wanted) {
    for (const char* name : kIdentityLabels) {
        const auto it = record_labels.find(name);
        if (it == record_labels.end() || it->second != label_or_empty(wanted, name)) {
            return false;
        }
    }
    const auto call = record_labels.find("call");
    const auto wanted_call = wanted.find("call");
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
    return runtime::SandboxHandle::from_runtime_json(record.supervisor.pid,
                                                     record.supervisor.start_time, record.runtime);
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
        if (const auto handle = handle_of(record)) {
            runtime::destroy_sandbox(*handle);
        } else {
            // A create that crashed before the supervisor was recorded: its supervisor may still
            // run in cgroups the record does not name; gc's cleanup finds them by name.
            runtime::remove_recorded_cgroups(record);
        }
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
    if (!pidfd || runtime::live_process_start_time(record.supervisor.pid) !=
                      std::optional<std::uint64_t>(record.supervisor.start_time)) {
        return false;
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

std::optional<runtime::SandboxRecord> find_warm(runtime::Registry& registry, const Labels& labels) {
    for (auto& record : registry.list()) {
        if (!same_identity(record.labels, labels)) {
            continue;
        }
        if (!record_alive(record)) {
            destroy_recorded(registry, record);  // expired or crashed
            continue;
        }
        return record;
    }
    return std::nullopt;
}

std::optional<runtime::SandboxRecord> find_live(const runtime::Registry& registry,
                                                const Labels& labels) {
    for (auto& record : registry.list()) {
        if (same_identity(record.labels, labels) && record_alive(record)) {
            return record;
        }
    }
    return std::nullopt;
}

std::optional<runtime::SandboxRecord> take_pooled(runtime::Registry& registry,
                                                  const std::string& signature,
                                                  const Labels& labels) {
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
        registry.update(record);
        return record;
    }
    return std::nullopt;
}

}  // namespace maf_sandbox::local
