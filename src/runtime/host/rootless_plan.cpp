// The launcher's rootless decisions (rootless_plan.hpp).
#include "rootless_plan.hpp"

#include <pwd.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <string>

#include "maf_sandbox/core/errors.hpp"
#include "maf_sandbox/runtime/kernel/kernel_files.hpp"

namespace maf_sandbox::runtime {

std::optional<IdPool> rootless_id_pool() {
    const uid_t uid = ::geteuid();
    const passwd* entry = ::getpwuid(uid);
    const std::string user = entry != nullptr && entry->pw_name ? entry->pw_name : "";
    const auto subuid = read_kernel_file("/etc/subuid");
    const auto subgid = read_kernel_file("/etc/subgid");
    if (!subuid || !subgid) {
        return std::nullopt;
    }
    try {
        return IdPool::from_subordinate_ids(user, uid, *subuid, *subgid);
    } catch (const InvalidArgument&) {
        return std::nullopt;  // none delegated: the user's own id alone
    }
}

RootlessIdMap rootless_id_map(const std::optional<IdMapping>& slot) {
    RootlessIdMap map;
    map.uid = ::geteuid();
    map.gid = ::getegid();
    if (slot && slot->count > 1) {
        // Namespace id k (k >= 1) is the slot's host id k, as in the root pool; the slot's first
        // id stays unused, namespace id 0 being the user.
        map.sub_base = slot->host_base + 1;
        map.sub_count = slot->count - 1;
    }
    return map;
}

SandboxBudgets clamp_to_own_limits(SandboxBudgets budgets) {
    const auto clamp = [](std::uint64_t& value, int resource) {
        rlimit own{};
        if (value != 0 && ::getrlimit(resource, &own) == 0 && own.rlim_max != RLIM_INFINITY) {
            value = std::min<std::uint64_t>(value, own.rlim_max);
        }
    };
    clamp(budgets.nofile, RLIMIT_NOFILE);
    clamp(budgets.proxy_nofile, RLIMIT_NOFILE);
    clamp(budgets.sigpending, RLIMIT_SIGPENDING);
    clamp(budgets.msgqueue_bytes, RLIMIT_MSGQUEUE);
    return budgets;
}

}  // namespace maf_sandbox::runtime
