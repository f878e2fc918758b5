// The host checks of `maf-sandbox doctor` and of the local backend's start (host_checks.hpp).
// Each check looks at what the runtime will really use, and where it can, tries it (a user
// namespace is made, not inferred from sysctls).
#include "maf_sandbox/runtime/host/host_checks.hpp"

#include <linux/magic.h>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>

#include <fmt/format.h>

#include "maf_sandbox/core/errors.hpp"
#include "maf_sandbox/runtime/host/images.hpp"
#include "maf_sandbox/runtime/host/sandbox_process.hpp"
#include "maf_sandbox/runtime/kernel/kernel_files.hpp"
#include "maf_sandbox/runtime/kernel/rootless.hpp"
#include "maf_sandbox/runtime/wire/id_claims.hpp"
#include "maf_sandbox/runtime/wire/registry.hpp"
#include "rootless_plan.hpp"

namespace maf_sandbox::runtime {

namespace {

// The new mount API's mount_setattr (5.12) builds every root; overlayfs in a user namespace
// (rootless) came in 5.11.
constexpr int kMinMajor = 5;
constexpr int kMinMinor = 12;

HostCheck ok(std::string name, std::string detail) {
    return HostCheck{std::move(name), CheckStatus::ok, std::move(detail), {}, false};
}

HostCheck not_ok(std::string name, CheckStatus status, std::string detail, std::string fix,
                 bool blocking) {
    return HostCheck{std::move(name), status, std::move(detail), std::move(fix), blocking};
}

std::string sysctl_text(const char* path) {
    auto text = read_kernel_file(path).value_or("");
    while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) {
        text.pop_back();
    }
    return text;
}

HostCheck check_kernel() {
    utsname name{};
    ::uname(&name);
    int major = 0, minor = 0;
    std::sscanf(name.release, "%d.%d", &major, &minor);
    const std::string detail = fmt::format("Linux {}", name.release);
    if (major > kMinMajor || (major == kMinMajor && minor >= kMinMinor)) {
        return ok("kernel", detail);
    }
    return not_ok("kernel", CheckStatus::missing, detail,
                  fmt::format("use Linux {}.{} or later (the new mount API and overlayfs in user "
                              "namespaces)",
                              kMinMajor, kMinMinor),
                  true);
}

// A child makes a user and a mount namespace, as the supervisor will.
HostCheck check_user_namespaces(bool rootless) {
    std::string detail;
    std::string fix;
    const auto max = sysctl_text("/proc/sys/user/max_user_namespaces");
    detail = fmt::format("user.max_user_namespaces = {}", max.empty() ? "?" : max);
    const auto clone = sysctl_text("/proc/sys/kernel/unprivileged_userns_clone");
    if (!clone.empty()) {
        detail += fmt::format(", kernel.unprivileged_userns_clone = {}", clone);
    }
    const auto apparmor = sysctl_text("/proc/sys/kernel/apparmor_restrict_unprivileged_userns");
    if (!apparmor.empty()) {
        detail += fmt::format(", kernel.apparmor_restrict_unprivileged_userns = {}", apparmor);
    }
    const pid_t child = ::fork();
    if (child == 0) {
        ::_exit(::unshare(CLONE_NEWUSER | CLONE_NEWNS) == 0 ? 0 : (errno & 0x7f));
    }
    int status = 0;
    if (child < 0 || ::waitpid(child, &status, 0) != child) {
        return not_ok("user namespaces", CheckStatus::missing,
                      detail + "; could not fork to try one", "free a process slot", true);
    }
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
        return ok("user namespaces", detail + "; a new one was made");
    }
    const int error = WIFEXITED(status) ? WEXITSTATUS(status) : EPERM;
    if (max == "0") {
        fix = "sysctl -w user.max_user_namespaces=15000";
    } else if (clone == "0") {
        fix = "sysctl -w kernel.unprivileged_userns_clone=1";
    } else if (apparmor == "1") {
        fix =
            "sysctl -w kernel.apparmor_restrict_unprivileged_userns=0 (or an AppArmor profile "
            "allowing userns for maf-sandbox-supervisor)";
    } else {
        fix = rootless ? "allow unprivileged user namespaces (a container runtime's seccomp "
                         "profile may forbid them), or run as root"
                       : "use a kernel with user namespaces (CONFIG_USER_NS)";
    }
    return not_ok("user namespaces", CheckStatus::missing,
                  fmt::format("{}; making one failed: {}", detail, std::strerror(error)), fix,
                  true);
}

HostCheck check_cgroups(bool rootless) {
    struct statfs fs {};
    const bool v2 = ::statfs("/sys/fs/cgroup", &fs) == 0 && fs.f_type == CGROUP2_SUPER_MAGIC;
    const std::string version = v2 ? "cgroup v2" : "cgroup v1 (or hybrid)";
    if (!rootless) {
        return ok("cgroups", version + "; memory, CPU and pids limits per sandbox");
    }
    std::string delegated;
    if (v2) {
        const auto self = read_kernel_file("/proc/self/cgroup").value_or("");
        if (self.starts_with("0::")) {
            auto path = self.substr(3);
            path.erase(path.find_last_not_of("\n") + 1);
            const auto dir = "/sys/fs/cgroup" + path;
            if (::access(dir.c_str(), W_OK) == 0) {
                delegated = dir;
            }
        }
    }
    return not_ok(
        "cgroups", CheckStatus::limited,
        fmt::format("{}; rootless mode writes no cgroup{}: memory and CPU limits are refused, the "
                    "pids limit is RLIMIT_NPROC in the sandbox's user namespace",
                    version,
                    delegated.empty()
                        ? ""
                        : fmt::format(" (a writable subtree {} exists, not yet used)", delegated)),
        "run as root for memory and CPU limits; rootless, leave --memory out (its default is none)",
        false);
}

HostCheck check_ids(bool rootless) {
    if (!rootless) {
        try {
            const auto pool = IdPool::from_environment();
            const auto dir = default_id_claims_dir();
            return ok("ids", fmt::format("host id pool of {} sandbox slots; claims in {}",
                                         pool.slot_count(pool.guest_count(kFullGuestIdCount)),
                                         dir.string()));
        } catch (const std::exception& e) {
            return not_ok("ids", CheckStatus::missing, e.what(),
                          "set MAF_SANDBOX_ID_POOL to free host id ranges", true);
        }
    }
    const auto pool = rootless_id_pool();
    const auto uidmap = find_id_map_helper("newuidmap");
    const auto gidmap = find_id_map_helper("newgidmap");
    if (!pool) {
        return not_ok("ids", CheckStatus::limited,
                      "no subordinate ids for this user in /etc/subuid and /etc/subgid: a "
                      "sandbox maps your own id alone, and its programs run as its root",
                      fmt::format("as root: usermod --add-subuids 100000-165535 --add-subgids "
                                  "100000-165535 {} (and install uidmap)",
                                  ::geteuid()),
                      false);
    }
    if (!uidmap || !gidmap) {
        return not_ok("ids", CheckStatus::missing,
                      "subordinate ids are delegated but newuidmap/newgidmap are missing",
                      "apt-get install uidmap", true);
    }
    struct stat st {};
    if (::stat(uidmap->c_str(), &st) != 0 || (st.st_mode & S_ISUID) == 0 || st.st_uid != 0) {
        return not_ok("ids", CheckStatus::missing,
                      fmt::format("{} is not set-user-id root", uidmap->string()),
                      "reinstall uidmap (apt-get install --reinstall uidmap)", true);
    }
    return ok("ids", fmt::format("{} slots of {} subordinate ids; {} and {}; claims in {}",
                                 pool->slot_count(pool->guest_count(kRootlessGuestIdCount)),
                                 kRootlessGuestIdCount, uidmap->string(), gidmap->string(),
                                 default_id_claims_dir().string()));
}

HostCheck check_overlayfs() {
    const auto filesystems = read_kernel_file("/proc/filesystems").value_or("");
    if (filesystems.find("\toverlay\n") != std::string::npos) {
        return ok("overlayfs", "overlay is in /proc/filesystems");
    }
    return not_ok("overlayfs", CheckStatus::limited,
                  "overlay is not in /proc/filesystems (it may load on first use)",
                  "modprobe overlay; imported images with layers need it", false);
}

HostCheck check_seccomp() {
    if (::prctl(PR_GET_SECCOMP, 0, 0, 0, 0) >= 0) {
        return ok("seccomp", "filters available (every guest runs under one)");
    }
    return not_ok("seccomp", CheckStatus::missing, std::strerror(errno),
                  "use a kernel with CONFIG_SECCOMP_FILTER", true);
}

HostCheck check_egress(bool rootless) {
    const auto reason = egress_unavailable_reason(Egress::unrestricted);
    if (reason.empty()) {
        return ok("slirp4netns", "egress closed, allowlist and unrestricted");
    }
    return not_ok("slirp4netns", CheckStatus::limited,
                  fmt::format("egress closed{} only: {}", rootless ? "" : " and allowlist", reason),
                  rootless ? "run as root for allowlist or unrestricted egress"
                           : "apt-get install slirp4netns",
                  false);
}

HostCheck check_supervisor() {
    try {
        return ok("supervisor", supervisor_executable().string());
    } catch (const std::exception& e) {
        return not_ok("supervisor", CheckStatus::missing, e.what(),
                      "install maf-sandbox-supervisor next to maf-sandbox, or set "
                      "MAF_SANDBOX_SUPERVISOR",
                      true);
    }
}

HostCheck check_image_store() {
    const auto dir = default_state_dir();
    try {
        const ImageStore store(dir);
        return ok("image store", fmt::format("{} (state and images)", dir.string()));
    } catch (const std::exception& e) {
        return not_ok("image store", CheckStatus::missing, e.what(),
                      fmt::format("make {} a directory of yours (0700), or set "
                                  "MAF_SANDBOX_STATE_DIR",
                                  dir.string()),
                      true);
    }
}

const char* label(CheckStatus status) {
    switch (status) {
        case CheckStatus::ok:
            return "OK";
        case CheckStatus::limited:
            return "LIMITED";
        case CheckStatus::missing:
            return "MISSING";
    }
    return "?";
}

}  // namespace

std::vector<HostCheck> run_host_checks() {
    const bool rootless = running_rootless();
    std::vector<HostCheck> checks;
    checks.push_back(
        ok("mode", rootless ? fmt::format("rootless (uid {})", ::geteuid()) : std::string("root")));
    checks.push_back(check_kernel());
    checks.push_back(check_user_namespaces(rootless));
    checks.push_back(check_cgroups(rootless));
    checks.push_back(check_ids(rootless));
    checks.push_back(check_overlayfs());
    checks.push_back(check_seccomp());
    checks.push_back(check_egress(rootless));
    checks.push_back(check_supervisor());
    checks.push_back(check_image_store());
    return checks;
}

bool local_backend_can_start(const std::vector<HostCheck>& checks) {
    for (const auto& check : checks) {
        if (check.blocking && check.status == CheckStatus::missing) {
            return false;
        }
    }
    return true;
}

std::string format_host_checks(const std::vector<HostCheck>& checks) {
    std::string text;
    for (const auto& check : checks) {
        text += fmt::format("{:<8} {}: {}\n", label(check.status), check.name, check.detail);
        if (check.status != CheckStatus::ok && !check.fix.empty()) {
            text += fmt::format("         fix: {}\n", check.fix);
        }
    }
    return text;
}

void ensure_local_backend_can_start() {
    const auto checks = run_host_checks();
    if (local_backend_can_start(checks)) {
        return;
    }
    std::string reasons;
    for (const auto& check : checks) {
        if (check.blocking && check.status == CheckStatus::missing) {
            reasons += fmt::format("; {}: {} (fix: {})", check.name, check.detail, check.fix);
        }
    }
    throw NoSandboxBackend(fmt::format(
        "the local backend cannot start on this host{}; `maf-sandbox doctor` lists every check",
        reasons));
}

}  // namespace maf_sandbox::runtime
