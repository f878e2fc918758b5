// The host-wide kernel budgets a sandbox could otherwise spend for everyone, and the per-sandbox
// bounds that keep it to its share (docs/SECURITY.md, "Identities and budgets"):
// - processes: the pids limits of all live sandboxes together fit a share of kernel.pid_max
//   (admission, id_claims.hpp);
// - open files: RLIMIT_NOFILE x the sandbox's pids limit, plus its egress proxy's RLIMIT_NOFILE
//   (allowlist egress), is at most a share of fs.file-max;
// - queued signals and POSIX message queue bytes: RLIMIT_SIGPENDING and RLIMIT_MSGQUEUE, set when
//   the sandbox's user namespace is created, so the kernel bounds the whole sandbox by them;
// - inotify, fanotify and namespaces: the sandbox's user namespace's /proc/sys/user/max_* limits.
// The per-user kernel counters all of these are charged to belong to the sandbox's own host uid
// (its user namespace's owner), never to host root.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <boost/json/value.hpp>

#include "maf_sandbox/core/capacity_error.hpp"

namespace maf_sandbox::runtime {

// One /proc/sys/user/<name> limit of the sandbox's user namespace.
struct UserNamespaceLimit {
    std::string name;  // e.g. "max_inotify_instances"
    std::uint64_t value = 0;
    bool operator==(const UserNamespaceLimit&) const = default;
};

// The fewest descriptors a sandbox process may have; a pids limit that leaves less within the
// file share is refused.
inline constexpr std::uint64_t kMinNofile = 64;

struct HostBudgets {
    // Percent of kernel.pid_max that the pids limits of all live sandboxes together may use.
    // Env MAF_SANDBOX_PID_SHARE.
    std::uint32_t pid_share_percent = 75;
    // Percent of fs.file-max that one sandbox at its pids limit may hold open:
    // RLIMIT_NOFILE = min(max_nofile, floor(fs.file-max x file_share_percent / 100 / pids)).
    // Env MAF_SANDBOX_FILE_SHARE.
    std::uint32_t file_share_percent = 10;
    std::uint64_t max_nofile = 65536;
    // RLIMIT_NOFILE of the sandbox's egress proxy (allowlist egress only), at most half the file
    // share; the guest's processes divide what the proxy leaves of the share. The proxy serves
    // as many sessions at once as fit in it (egress_sessions_within, egress.hpp) and closes the
    // connections past that on accept. Env MAF_SANDBOX_PROXY_NOFILE.
    std::uint64_t proxy_nofile = 2048;
    // RLIMIT_SIGPENDING and RLIMIT_MSGQUEUE of the sandbox's processes, and (copied by the kernel
    // when the user namespace is made) of the whole sandbox together. Env MAF_SANDBOX_SIGPENDING,
    // MAF_SANDBOX_MSGQUEUE_BYTES.
    std::uint64_t sigpending = 4096;
    std::uint64_t msgqueue_bytes = 819200;
    // Written to the sandbox's user namespace by its PID 1 before it drops its capabilities. Each
    // bounds one guest uid; the sandbox as a whole is also bounded by the host's own
    // /proc/sys/user/max_* for its owner uid.
    std::vector<UserNamespaceLimit> namespace_limits = {
        {"max_inotify_instances", 128}, {"max_inotify_watches", 65536}, {"max_fanotify_groups", 16},
        {"max_fanotify_marks", 8192},   {"max_user_namespaces", 16},
    };

    // The defaults, each overridden by its environment variable when set. Throws InvalidArgument
    // naming the variable when one is not a number in range.
    static HostBudgets from_environment();
};

// What one sandbox gets, computed by the launcher and applied by the supervisor.
struct SandboxBudgets {
    std::uint64_t nofile = 0;  // 0 = leave the inherited limits (a config from an older runtime)
    std::uint64_t proxy_nofile = 0;  // 0 = no egress proxy (or a config from an older runtime)
    std::uint64_t sigpending = 0;
    std::uint64_t msgqueue_bytes = 0;
    std::vector<UserNamespaceLimit> namespace_limits;

    boost::json::value to_json() const;
    static SandboxBudgets from_json(const boost::json::value& json);
};

// A number from a /proc/sys file such as /proc/sys/kernel/pid_max. Throws SystemError.
std::uint64_t read_kernel_number(const char* path);

// How many processes all live sandboxes together may be allowed: pid_max x pid_share_percent.
std::uint64_t pid_budget(const HostBudgets& budgets, std::uint64_t pid_max);

// The budgets of a sandbox whose pids limit is `pids` (0 = none: charged as pid_max), with an
// egress proxy when `egress_proxy` (allowlist egress): the proxy's descriptors come out of the
// same share, before the guest's processes divide the rest. Throws SandboxCapacityExceeded when
// its share of file_max leaves fewer than kMinNofile descriptors a process or for the proxy.
SandboxBudgets sandbox_budgets(const HostBudgets& budgets, std::uint64_t pids,
                               std::uint64_t file_max, std::uint64_t pid_max,
                               bool egress_proxy = false);

// Sets the calling process's RLIMIT_NOFILE (soft and hard) to `nofile`; false with errno set.
// Async-signal-safe: the egress proxy's recipe calls it in a fork of the supervisor.
bool limit_open_files(std::uint64_t nofile) noexcept;

// --- Applied in the supervisor ------------------------------------------------------------------

// Sets RLIMIT_NOFILE, RLIMIT_SIGPENDING, RLIMIT_MSGQUEUE and RLIMIT_CORE (0: no core dumps
// reach the host's core_pattern) (soft and hard) of the calling
// process for its lifetime until destruction, which restores them (the caller must be root to
// raise them back). Made around the creation of the sandbox's user namespace, whose limits the
// kernel copies from its creator. Throws SystemError.
class ScopedCreationLimits {
  public:
    explicit ScopedCreationLimits(const SandboxBudgets& budgets);
    ScopedCreationLimits(const ScopedCreationLimits&) = delete;
    ScopedCreationLimits& operator=(const ScopedCreationLimits&) = delete;
    ~ScopedCreationLimits();

  private:
    std::vector<std::pair<int, std::pair<std::uint64_t, std::uint64_t>>> saved_;
};

// Writes each limit to /proc/sys/user/<name> of the caller's user namespace (needs
// CAP_SYS_RESOURCE in it: the sandbox's root before it drops its capabilities). Throws SystemError.
void write_user_namespace_limits(const std::vector<UserNamespaceLimit>& limits);

}  // namespace maf_sandbox::runtime
