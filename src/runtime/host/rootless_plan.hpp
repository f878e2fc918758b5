// The launcher's rootless decisions (rootless.hpp): which ids a rootless sandbox gets and which
// budgets an unprivileged launcher can set. Kept apart from launch_sandbox, which calls them.
#pragma once

#include <sys/types.h>

#include <optional>

#include "maf_sandbox/runtime/kernel/host_budgets.hpp"
#include "maf_sandbox/runtime/kernel/namespaces.hpp"
#include "maf_sandbox/runtime/kernel/rootless.hpp"
#include "maf_sandbox/runtime/wire/id_ranges.hpp"

namespace maf_sandbox::runtime {

// Guest ids a rootless sandbox asks of the user's subordinate ids: enough for root and the usual
// service and login users of an image, small enough that a usual 65536-id delegation holds many
// sandboxes at once (the root pool's slots are whole 65536-id namespaces).
inline constexpr std::uint32_t kRootlessGuestIdCount = 2048;

// The calling user's subordinate ids (both /etc/subuid and /etc/subgid), or nullopt when none
// are delegated (the sandbox then maps the user's own id alone).
std::optional<IdPool> rootless_id_pool();

// The namespace map of a rootless sandbox whose claimed slot is `slot` (nullopt: none).
RootlessIdMap rootless_id_map(const std::optional<IdMapping>& slot);

// `budgets` within what this unprivileged process may set: no resource limit above its own hard
// limit (raising one needs host privilege).
SandboxBudgets clamp_to_own_limits(SandboxBudgets budgets);

}  // namespace maf_sandbox::runtime
