// Rootless mode's kernel steps: the user's state paths and the supervisor's own user namespace
// (rootless.hpp). The namespace is entered by unshare, not by a clone, so the process that asked
// for it keeps its pid: the helper that maps it (newuidmap must run outside the namespace, where
// its set-user-id bit counts) names the caller by that pid.
#include "maf_sandbox/runtime/kernel/rootless.hpp"

#include <fcntl.h>
#include <pwd.h>
#include <sched.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "maf_sandbox/core/errors.hpp"
#include "maf_sandbox/runtime/kernel/unique_fd.hpp"

namespace maf_sandbox::runtime {

namespace fs = std::filesystem;

namespace {

constexpr const char* kUidmapFix =
    "install the uidmap package (apt-get install uidmap) for newuidmap and newgidmap, or remove "
    "your lines from /etc/subuid and /etc/subgid to run with your own id alone";

fs::path home_dir() {
    if (const char* home = std::getenv("HOME"); home != nullptr && *home == '/') {
        return home;
    }
    if (const passwd* entry = ::getpwuid(::geteuid()); entry != nullptr && entry->pw_dir) {
        return entry->pw_dir;
    }
    return fs::path("/tmp") / fmt::format("maf-sandbox-{}", ::geteuid());
}

std::optional<fs::path> absolute_env(const char* name) {
    if (const char* value = std::getenv(name); value != nullptr && *value == '/') {
        return fs::path(value);
    }
    return std::nullopt;
}

// Writes `text` to /proc/self/<name>; errno or 0.
int write_self(const char* name, const std::string& text) {
    UniqueFd fd(::open(fmt::format("/proc/self/{}", name).c_str(), O_WRONLY | O_CLOEXEC));
    if (!fd) {
        return errno;
    }
    const ssize_t wrote = ::write(fd.get(), text.data(), text.size());
    return wrote == static_cast<ssize_t>(text.size()) ? 0 : (wrote < 0 ? errno : EIO);
}

// In the forked helper: runs `helper pid args...` and waits; its exit status, or 127.
int run_helper(const fs::path& helper, pid_t pid, const std::string& arguments) {
    std::vector<std::string> words{helper.string(), std::to_string(pid)};
    std::size_t start = 0;
    while (start < arguments.size()) {
        const auto end = arguments.find(' ', start);
        words.push_back(arguments.substr(start, end == std::string::npos ? end : end - start));
        start = end == std::string::npos ? arguments.size() : end + 1;
    }
    std::vector<char*> argv;
    for (auto& word : words) {
        argv.push_back(word.data());
    }
    argv.push_back(nullptr);
    const pid_t child = ::fork();
    if (child == 0) {
        char* const envp[] = {nullptr};
        ::execve(argv[0], argv.data(), envp);
        ::_exit(127);
    }
    int status = 0;
    if (child < 0 || ::waitpid(child, &status, 0) != child) {
        return 127;
    }
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

}  // namespace

bool running_rootless() noexcept {
    return ::geteuid() != 0;
}

fs::path rootless_state_dir() {
    if (auto state = absolute_env("XDG_STATE_HOME")) {
        return *state / "maf-sandbox";
    }
    return home_dir() / ".local" / "state" / "maf-sandbox";
}

fs::path rootless_runtime_dir() {
    if (auto runtime = absolute_env("XDG_RUNTIME_DIR")) {
        return *runtime / "maf-sandbox";
    }
    // systemd-logind's directory, only when it is really this user's (it may be absent: su,
    // a container, a cron job).
    const fs::path run_user = fmt::format("/run/user/{}", ::geteuid());
    struct stat st {};
    if (::lstat(run_user.c_str(), &st) == 0 && S_ISDIR(st.st_mode) && st.st_uid == ::geteuid() &&
        (st.st_mode & 077) == 0) {
        return run_user / "maf-sandbox";
    }
    return rootless_state_dir() / "run";
}

std::string rootless_map_arguments(const RootlessIdMap& map, bool gids) {
    auto text = fmt::format("0 {} 1", gids ? map.gid : map.uid);
    if (map.sub_count > 0) {
        text += fmt::format(" 1 {} {}", map.sub_base, map.sub_count);
    }
    return text;
}

std::optional<fs::path> find_id_map_helper(const char* name) {
    for (const char* dir : {"/usr/bin", "/bin", "/usr/sbin", "/sbin", "/usr/local/bin"}) {
        const fs::path candidate = fs::path(dir) / name;
        if (::access(candidate.c_str(), X_OK) == 0) {
            return candidate;
        }
    }
    return std::nullopt;
}

void enter_rootless_user_namespace(const RootlessIdMap& map) {
    if (map.sub_count == 0) {
        if (::unshare(CLONE_NEWUSER) != 0) {
            throw SystemError(errno, "creating the rootless sandbox's user namespace",
                              "allow unprivileged user namespaces (sysctl "
                              "user.max_user_namespaces > 0; kernel.apparmor_restrict_"
                              "unprivileged_userns=0); `maf-sandbox doctor` checks it");
        }
        int error = write_self("setgroups", "deny");
        if (error == 0) {
            error = write_self("uid_map", fmt::format("0 {} 1\n", map.uid));
        }
        if (error == 0) {
            error = write_self("gid_map", fmt::format("0 {} 1\n", map.gid));
        }
        if (error != 0) {
            throw SystemError(error, "mapping the rootless sandbox's one id");
        }
    } else {
        const auto uidmap = find_id_map_helper("newuidmap");
        const auto gidmap = find_id_map_helper("newgidmap");
        if (!uidmap || !gidmap) {
            throw SystemError(ENOENT, "finding newuidmap and newgidmap", kUidmapFix);
        }
        int go[2];
        if (::pipe2(go, O_CLOEXEC) != 0) {
            throw SystemError(errno, "creating the id-map helper's pipe");
        }
        UniqueFd go_read(go[0]);
        UniqueFd go_write(go[1]);
        const pid_t self = ::getpid();
        const std::string uids = rootless_map_arguments(map, false);
        const std::string gids = rootless_map_arguments(map, true);
        const pid_t helper = ::fork();
        if (helper < 0) {
            throw SystemError(errno, "forking the id-map helper");
        }
        if (helper == 0) {
            go_write.reset();
            char byte = 0;
            if (::read(go_read.get(), &byte, 1) != 1) {
                ::_exit(126);  // the caller failed to make its namespace
            }
            const int status = run_helper(*uidmap, self, uids);
            ::_exit(status != 0 ? status : run_helper(*gidmap, self, gids));
        }
        go_read.reset();
        const int unshared = ::unshare(CLONE_NEWUSER) == 0 ? 0 : errno;
        if (unshared == 0) {
            (void)::write(go_write.get(), "g", 1);
        }
        go_write.reset();
        int status = 0;
        while (::waitpid(helper, &status, 0) < 0 && errno == EINTR) {
        }
        if (unshared != 0) {
            throw SystemError(unshared, "creating the rootless sandbox's user namespace",
                              "allow unprivileged user namespaces; `maf-sandbox doctor` checks it");
        }
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
            throw SystemError(EPERM,
                              fmt::format("mapping the rootless sandbox's ids with newuidmap {} "
                                          "and newgidmap {} (helper status {})",
                                          uids, gids, status),
                              "check your lines in /etc/subuid and /etc/subgid and that "
                              "newuidmap and newgidmap are set-user-id root");
        }
    }
    if (::setresgid(0, 0, 0) != 0 || ::setresuid(0, 0, 0) != 0) {
        throw SystemError(errno, "becoming root of the rootless sandbox's user namespace");
    }
    // The pids limit without a cgroup: the kernel counts a uid's processes per user namespace,
    // and this namespace is the sandbox's alone. Namespace root (PID 1, the exec handlers) is
    // exempt while it holds its capabilities; guest processes, which hold none, are counted.
    if (map.pids != 0) {
        rlimit limit{};
        ::getrlimit(RLIMIT_NPROC, &limit);
        limit.rlim_max = std::min<rlim_t>(limit.rlim_max, map.pids);  // raising needs privilege
        limit.rlim_cur = limit.rlim_max;
        if (::setrlimit(RLIMIT_NPROC, &limit) != 0) {
            throw SystemError(errno, fmt::format("limiting the rootless sandbox to {} processes "
                                                 "(RLIMIT_NPROC)",
                                                 map.pids));
        }
    }
}

bool own_pid_namespace_init(pid_t pid) {
    if (pid <= 0) {
        return false;
    }
    std::FILE* status = std::fopen(fmt::format("/proc/{}/status", pid).c_str(), "re");
    if (status == nullptr) {
        return false;
    }
    bool own = false;
    bool init = false;
    char line[512];
    while (std::fgets(line, sizeof line, status) != nullptr) {
        unsigned long real = 0, effective = 0;
        if (std::sscanf(line, "Uid: %lu %lu", &real, &effective) == 2) {
            own = real == ::geteuid();
        } else if (std::strncmp(line, "NSpid:", 6) == 0) {
            // "NSpid: <ours> ... <innermost>": more than one pid, the innermost 1.
            std::string_view pids(line + 6);
            while (!pids.empty() && (pids.back() == '\n' || pids.back() == ' ')) {
                pids.remove_suffix(1);
            }
            const auto last = pids.find_last_of(" \t");
            init = last != std::string_view::npos && pids.substr(last + 1) == "1" &&
                   pids.substr(0, last).find_first_not_of(" \t") != std::string_view::npos;
        }
    }
    std::fclose(status);
    return own && init;
}

RootlessControls rootless_controls() noexcept {
    return RootlessControls{};
}

void refuse_rootless_limit(const char* control, const char* flag) {
    throw SandboxCapabilityNotSupported(fmt::format(
        "a {} limit cannot be enforced by a rootless sandbox on this host: it needs a cgroup, and "
        "no cgroup is writable by this user (maf-sandbox doctor shows the cgroup check); run as "
        "root, or leave out {} (0 means none)",
        control, flag));
}

}  // namespace maf_sandbox::runtime
