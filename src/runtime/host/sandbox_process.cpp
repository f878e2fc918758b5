// One concern, a sandbox's supervisor process from its launch to its end: launching it detached
// from its creator, checking the handles read back from records, and tearing the sandbox down.
#include "maf_sandbox/runtime/host/sandbox_process.hpp"

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

#include <fmt/format.h>
#include <boost/json.hpp>

#include "../kernel/fd_ops.hpp"
#include "maf_sandbox/core/errors.hpp"
#include "maf_sandbox/runtime/host/recorded_handle.hpp"
#include "maf_sandbox/runtime/kernel/kernel_files.hpp"
#include "maf_sandbox/runtime/wire/id_claims.hpp"
#include "maf_sandbox/runtime/wire/record_cgroups.hpp"
#include "maf_sandbox/runtime/wire/supervisor_config.hpp"
#include "rootless_plan.hpp"

namespace maf_sandbox::runtime {

namespace fs = std::filesystem;
namespace json = boost::json;
using SteadyClock = std::chrono::steady_clock;

boost::json::object SandboxHandle::runtime_json() const {
    json::array cgroup_paths;
    for (const auto& path : cgroups) {
        cgroup_paths.emplace_back(path.string());
    }
    return json::object{{"cgroup_paths", std::move(cgroup_paths)},
                        {"cgroup_layout", to_string(cgroup_layout)},
                        {"sandbox_dir", sandbox_dir.string()},
                        {"socket", socket.string()},
                        {"guest_host_uid", guest_host_uid},
                        {"guest_host_gid", guest_host_gid},
                        {"sandbox_id", sandbox_id},
                        {"id_base", ids.host_base},
                        {"id_count", ids.count},
                        {"id_claims_dir", id_claims_dir.string()}};
}

SandboxHandle SandboxHandle::from_runtime_json(pid_t pid, std::uint64_t start_time,
                                               const json::object& in) {
    SandboxHandle handle;
    handle.pid = pid;
    handle.start_time = start_time;
    for (const auto& path : in.at("cgroup_paths").as_array()) {
        handle.cgroups.emplace_back(std::string(path.as_string()));
    }
    handle.cgroup_layout = parse_cgroup_layout(in.at("cgroup_layout").as_string());
    handle.sandbox_dir = std::string(in.at("sandbox_dir").as_string());
    handle.socket = std::string(in.at("socket").as_string());
    handle.guest_host_uid = in.at("guest_host_uid").to_number<uid_t>();
    handle.guest_host_gid = in.at("guest_host_gid").to_number<gid_t>();
    // Absent from a handle an older runtime recorded: its sandbox had the one shared mapping.
    if (const auto* id = in.if_contains("sandbox_id"); id && id->is_string()) {
        handle.sandbox_id = std::string(id->get_string());
    }
    if (const auto* base = in.if_contains("id_base"); base && base->is_number()) {
        handle.ids.host_base = base->to_number<uid_t>();
        handle.ids.count = in.at("id_count").to_number<std::uint32_t>();
    }
    if (const auto* dir = in.if_contains("id_claims_dir"); dir && dir->is_string()) {
        handle.id_claims_dir = std::string(dir->get_string());
    }
    return handle;
}

std::optional<std::uint64_t> live_process_start_time(pid_t pid) {
    if (pid <= 0) {
        return std::nullopt;
    }
    const auto text = read_kernel_file(fmt::format("/proc/{}/stat", pid)).value_or("");
    const auto close = text.rfind(')');
    if (close == std::string::npos) {
        return std::nullopt;
    }
    std::istringstream fields(text.substr(close + 2));
    std::string field;
    // After the command: field 3 (state) is first; start time is field 22.
    for (int index = 3; index <= 22 && fields >> field; ++index) {
        if (index == 3 && (field == "Z" || field == "X")) {
            return std::nullopt;
        }
        if (index == 22) {
            return std::stoull(field);
        }
    }
    return std::nullopt;
}

bool sandbox_alive(const SandboxHandle& handle) {
    const auto start = live_process_start_time(handle.pid);
    return start && *start == handle.start_time;
}

namespace {

// Reads the supervisor's report lines until "ready", "error: ..." or the deadline.
struct Report {
    pid_t pid = 0;
    bool ready = false;
    std::string error;
};

// `on_pid` runs when the "pid" line arrives, before "ready" is awaited.
Report read_report(int fd, SteadyClock::time_point deadline,
                   const std::function<void(pid_t)>& on_pid) {
    Report report;
    std::string buffer;
    for (;;) {
        std::size_t newline;
        while ((newline = buffer.find('\n')) != std::string::npos) {
            const std::string line = buffer.substr(0, newline);
            buffer.erase(0, newline + 1);
            if (line.starts_with("pid ")) {
                report.pid = std::stoi(line.substr(4));
                on_pid(report.pid);
            } else if (line == "ready") {
                report.ready = true;
                return report;
            } else if (line.starts_with("error: ")) {
                report.error = line.substr(7);
                return report;
            }
        }
        const auto left =
            std::chrono::duration_cast<std::chrono::milliseconds>(deadline - SteadyClock::now())
                .count();
        if (left <= 0) {
            report.error = "the supervisor did not become ready in time";
            return report;
        }
        pollfd pfd{fd, POLLIN, 0};
        if (::poll(&pfd, 1, static_cast<int>(left)) < 0 && errno != EINTR) {
            report.error = fmt::format("waiting for the supervisor: {}", std::strerror(errno));
            return report;
        }
        char chunk[512];
        const ssize_t n = ::read(fd, chunk, sizeof chunk);
        if (n == 0) {
            report.error = "the supervisor exited before it was ready";
            return report;
        }
        if (n > 0) {
            buffer.append(chunk, static_cast<std::size_t>(n));
        }
    }
}

// The guest's base environment for its egress mode: in allowlist mode every proxy variable a tool
// may read (tools differ in the case they read) points at the proxy, and loopback bypasses it.
std::vector<std::pair<std::string, std::string>> guest_env(const SandboxLaunch& launch) {
    auto env = launch.env;
    if (launch.egress.mode != Egress::allowlist) {
        return env;
    }
    constexpr const char* kProxyVariables[] = {"http_proxy",  "https_proxy", "HTTP_PROXY",
                                               "HTTPS_PROXY", "all_proxy",   "ALL_PROXY",
                                               "no_proxy",    "NO_PROXY"};
    std::erase_if(env, [&](const auto& entry) {
        return std::find(std::begin(kProxyVariables), std::end(kProxyVariables), entry.first) !=
               std::end(kProxyVariables);
    });
    const std::string proxy = fmt::format("http://127.0.0.1:{}", kGuestProxyPort);
    for (const char* name : {"http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY"}) {
        env.emplace_back(name, proxy);
    }
    env.emplace_back("no_proxy", "localhost,127.0.0.1");
    env.emplace_back("NO_PROXY", "localhost,127.0.0.1");
    return env;
}

// (perf) Ends the sandbox through its PID 1, if it still runs: when a PID namespace's init dies,
// the kernel stops the namespace from making new processes, kills every process left in it and
// waits for them before PID 1's pidfd reports the exit. What can remain in the sandbox's cgroups
// afterwards is only what runs outside the namespace (the egress proxy, slirp4netns), so the
// cgroup kill that follows usually finds them empty and skips its freezer rounds (each freeze or
// thaw flips a static key: code patching and an interrupt to every CPU). The pidfd is opened
// before the start time is checked, so a reused pid is never signalled.
// A pid and start time from a record are public (/proc), so they alone do not make the process
// the sandbox's: it is signalled only while it is in the sandbox's own maf-sbx-<id> cgroup, which
// only the runtime makes and fills.
void end_pid1(pid_t pid, std::uint64_t start_time, std::string_view id,
              std::chrono::milliseconds timeout) {
    if (pid <= 0) {
        return;
    }
    UniqueFd pidfd(static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)));
    if (!pidfd) {
        return;  // already gone
    }
    const auto start = live_process_start_time(pid);
    if (!start || *start != start_time) {
        return;  // gone, a zombie, or a different process by now
    }
    if (!process_in_sandbox_cgroup(pid, id)) {
        return;  // not the sandbox's (any more): the cgroup kill covers what is
    }
    if (::syscall(SYS_pidfd_send_signal, pidfd.get(), SIGKILL, nullptr, 0) != 0) {
        return;  // exited meanwhile; the cgroup kill covers anything else
    }
    pollfd pfd{pidfd.get(), POLLIN, 0};
    ::poll(&pfd, 1, static_cast<int>(timeout.count()));
}

// Thaws a sandbox that may be frozen; one that is not, or has no freezer, is left as it is (the
// teardown's kill rounds thaw again whatever this could not).
void thaw_before_kill(SandboxCgroup& cgroup) {
    try {
        cgroup.freeze(false);
    } catch (const Error&) {
        // No freezer, or a cgroup already gone: nothing is held frozen.
    }
}

// Writes all of `data` to `fd`; 0 or errno.
int write_whole(int fd, std::string_view data) {
    while (!data.empty()) {
        const ssize_t wrote = ::write(fd, data.data(), data.size());
        if (wrote < 0 && errno == EINTR) {
            continue;
        }
        if (wrote <= 0) {
            return wrote < 0 ? errno : EIO;
        }
        data.remove_prefix(static_cast<std::size_t>(wrote));
    }
    return 0;
}

// What the supervisor's spawned child needs, all prepared before the spawn.
struct SupervisorSpawn {
    const char* path;
    char* const* argv;
    char* const* envp;
    int ready_fd;
    int cgroup_fd;  // becomes kCgroupFd
    int config_fd;  // becomes kConfigFd
    int claim_fd;   // becomes kIdClaimFd
};

// Runs in the spawned child, on its own stack but in the caller's memory (CLONE_VM), while the
// calling thread waits (CLONE_VFORK): only system calls, nothing that allocates or locks.
int supervisor_child(void* arg) {
    const auto& spawn = *static_cast<const SupervisorSpawn*>(arg);
    // Own session and process group: the terminal's signals for the creator never reach it.
    ::setsid();
    // Out of the way of kReadyFd, kCgroupFd, kConfigFd and kIdClaimFd before any is placed.
    const int cgroup_fd = ::fcntl(spawn.cgroup_fd, F_DUPFD, kIdClaimFd + 1);
    const int config_fd = ::fcntl(spawn.config_fd, F_DUPFD, kIdClaimFd + 1);
    const int claim_fd = ::fcntl(spawn.claim_fd, F_DUPFD, kIdClaimFd + 1);
    if (cgroup_fd < 0 || config_fd < 0 || claim_fd < 0) {
        ::_exit(111);
    }
    // The caller's signal handlers live in its memory: back to the defaults (as posix_spawn
    // does) before any signal is let through.
    for (int signal = 1; signal < _NSIG; ++signal) {
        struct sigaction action {};
        if (::sigaction(signal, nullptr, &action) == 0 && action.sa_handler != SIG_IGN &&
            action.sa_handler != SIG_DFL) {
            action.sa_handler = SIG_DFL;
            action.sa_flags = 0;
            ::sigaction(signal, &action, nullptr);
        }
    }
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    if (spawn.ready_fd == kReadyFd) {
        ::fcntl(kReadyFd, F_SETFD, 0);  // dup2 onto itself would leave close-on-exec set
    } else if (::dup2(spawn.ready_fd, kReadyFd) < 0) {
        ::_exit(112);
    }
    if (::dup2(cgroup_fd, kCgroupFd) < 0 || ::dup2(config_fd, kConfigFd) < 0 ||
        ::dup2(claim_fd, kIdClaimFd) < 0) {
        ::_exit(112);
    }
    ::syscall(SYS_close_range, kIdClaimFd + 1, ~0u, 0);
    const int null = ::open("/dev/null", O_RDWR);
    ::dup2(null, 0);
    ::dup2(null, 1);
    ::dup2(null, 2);
    if (null > kReadyFd) {
        ::close(null);
    }
    ::execve(spawn.path, spawn.argv, spawn.envp);
    ::_exit(113);
}

// (perf) Starts the supervisor as posix_spawn does, with clone(CLONE_VM | CLONE_VFORK): no copy
// of the creator's address space and page tables (a fork of a large multi-threaded host such as
// the CLI or the emulator is a large part of a launch's CPU, twice over with a double fork, plus
// copy-on-write faults in the creator afterwards). The child is our child until its
// host-side half exits; the sandbox's PID 1 is then re-parented to init, as before. Returns -1
// with errno set when the kernel refuses.
pid_t spawn_supervisor(const SupervisorSpawn& spawn) {
    constexpr std::size_t kStackBytes = 64 * 1024;
    void* stack = ::mmap(nullptr, kStackBytes, PROT_READ | PROT_WRITE,
                         MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
    if (stack == MAP_FAILED) {
        return -1;
    }
    // Blocked across the clone so that no handler of ours runs in the child before it has reset
    // them; the child unblocks after the reset.
    sigset_t all, previous;
    sigfillset(&all);
    ::pthread_sigmask(SIG_SETMASK, &all, &previous);
    const pid_t child =
        ::clone(supervisor_child, static_cast<char*>(stack) + kStackBytes,
                CLONE_VM | CLONE_VFORK | SIGCHLD, const_cast<SupervisorSpawn*>(&spawn));
    const int saved = errno;
    ::pthread_sigmask(SIG_SETMASK, &previous, nullptr);
    ::munmap(stack, kStackBytes);
    errno = saved;
    return child;
}

}  // namespace

SandboxHandle launch_sandbox(const SandboxLaunch& launch) {
    const fs::path executable = supervisor_executable();
    // Admission first, before anything exists: the host's pid and file budgets, then a slot of
    // host ids that no other sandbox on this host holds.
    const HostBudgets host_budgets =
        launch.budgets ? *launch.budgets : HostBudgets::from_environment();
    const std::uint64_t pid_max = read_kernel_number("/proc/sys/kernel/pid_max");
    const bool rootless = running_rootless();
    if (rootless) {
        const auto controls = rootless_controls();
        if (launch.limits.memory_bytes != 0 && !controls.memory) {
            refuse_rootless_limit("memory", "--memory");
        }
        if (launch.limits.cpus != 0 && !controls.cpus) {
            refuse_rootless_limit("CPU", "the cpus setting");
        }
    }
    SandboxBudgets budgets = sandbox_budgets(host_budgets, launch.limits.pids,
                                             read_kernel_number("/proc/sys/fs/file-max"), pid_max,
                                             launch.egress.mode == Egress::allowlist);
    if (rootless) {
        budgets = clamp_to_own_limits(std::move(budgets));
    }
    const IdClaims claims(launch.id_claims_dir.empty() ? default_id_claims_dir()
                                                       : launch.id_claims_dir);
    // Rootless: a slot of the user's subordinate ids when it has any, else its own id alone
    // (no slot to claim: nothing else can hold it).
    std::optional<IdPool> pool = launch.id_pool;
    if (!pool) {
        pool = rootless ? rootless_id_pool() : IdPool::from_environment();
    }
    // Released (after the rollback below has ended everything) unless the launch succeeds.
    std::optional<IdClaim> claim;
    if (pool) {
        claim.emplace(claims.claim(
            *pool, IdClaimRequest{launch.id, rootless ? kRootlessGuestIdCount : kFullGuestIdCount,
                                  launch.limits.pids, pid_budget(host_budgets, pid_max),
                                  destroy_cgroups_named_for}));
    }
    std::optional<RootlessIdMap> rootless_map;
    if (rootless) {
        rootless_map = rootless_id_map(claim ? std::optional(claim->ids()) : std::nullopt);
        rootless_map->pids = launch.limits.pids;
    }
    // With the user's own id alone, the guest is namespace root: no other id exists there.
    const uid_t guest_uid = rootless_map && rootless_map->sub_count == 0 ? 0 : launch.guest_uid;
    const gid_t guest_gid = rootless_map && rootless_map->sub_count == 0 ? 0 : launch.guest_gid;
    const IdMapping ids = claim ? claim->ids() : IdMapping{::geteuid(), 1};
    SandboxHandle handle;
    handle.sandbox_id = launch.id;
    handle.ids = ids;
    handle.id_claims_dir = claim ? claims.dir() : fs::path();
    handle.sandbox_dir = launch.sandbox_dir;
    handle.socket = launch.sandbox_dir / "exec.sock";
    handle.guest_host_uid =
        rootless_map && guest_uid == 0 ? rootless_map->uid : ids.to_host(guest_uid);
    handle.guest_host_gid =
        rootless_map && guest_gid == 0 ? rootless_map->gid : ids.to_host(guest_gid);
    // Rootless, every id in the config is one of the supervisor's own user namespace.
    const uid_t root_uid = rootless ? 0 : ids.to_host(0);

    // Made after the supervisor is spawned, while it starts (CgroupPlacement).
    std::unique_ptr<SandboxCgroup> cgroup;
    // Until the supervisor is ready, a failure takes everything back.
    // The supervisor's host-side half is our child (it exits once the sandbox's PID 1 runs) and
    // is reaped here in every case, after the kill when the launch failed.
    struct Rollback {
        std::unique_ptr<SandboxCgroup>& cgroup;
        pid_t child = -1;
        bool armed = true;
        ~Rollback() {
            if (armed && cgroup) {
                try {
                    cgroup->destroy();
                } catch (...) {
                }
            }
            if (child > 0) {
                if (armed) {
                    // It may not have joined the cgroups yet (CgroupPlacement). Still our
                    // unreaped child, so the pid cannot have been reused.
                    ::kill(child, SIGKILL);
                }
                ::waitpid(child, nullptr, 0);
            }
        }
    } rollback{cgroup};

    SupervisorConfig config;
    config.id = launch.id;
    config.sandbox_dir = launch.sandbox_dir;
    config.socket_path = handle.socket;
    config.mounts = launch.mounts;
    config.mounts.root_uid = root_uid;
    config.mounts.root_gid = root_uid;
    config.mounts.guest_uid = rootless ? guest_uid : handle.guest_host_uid;
    config.mounts.guest_gid = rootless ? guest_gid : handle.guest_host_gid;
    config.ids = ids;
    config.rootless = rootless_map;
    config.budgets = budgets;
    config.guest_uid = guest_uid;
    config.guest_gid = guest_gid;
    config.base_env = guest_env(launch);
    config.default_cwd = launch.default_cwd;
    config.hostname = launch.hostname;
    config.idle_timeout = launch.idle_timeout;
    config.max_lifetime = launch.max_lifetime;
    config.egress = launch.egress;
    config.egress_operator = launch.egress_operator;
    config.seccomp = guest_seccomp_program();
    // The host files a sandbox's traffic makes grow count against its disk limit: their bound is
    // taken out of the writable layer, so layer and logs together stay within disk_bytes.
    std::uint64_t host_log_bytes = 0;
    if (launch.egress.mode == Egress::allowlist) {
        auto& limits = config.egress_operator.decision_log;
        limits.max_bytes = egress_log_budget(limits.max_bytes, config.mounts.disk_bytes);
        host_log_bytes = limits.max_bytes;
    } else if (launch.egress.mode == Egress::unrestricted) {
        host_log_bytes = kSlirpLogLimit;
    }
    if (config.mounts.disk_bytes > 2 * host_log_bytes) {
        config.mounts.disk_bytes -= host_log_bytes;
    }
    config.owner = launch.owner;
    config.owner_pending_label = launch.owner_pending_label;
    config.watch_later_owners = launch.watch_later_owners;
    if (launch.egress.mode == Egress::unrestricted) {
        // slirp4netns answers DNS on 10.0.2.3 (forwarding to the host's resolver).
        std::erase_if(config.mounts.files,
                      [](const GeneratedFile& file) { return file.target == "/etc/resolv.conf"; });
        config.mounts.files.push_back({"/etc/resolv.conf", "nameserver 10.0.2.3\n", 0644});
    }
    // The config travels in a memfd, not a file in the state directory and not a path in argv:
    // the sandbox's PID 1 is a fork of the supervisor, and its command line must name no host
    // directory (the host's layout stays private). (perf) One file fewer to write on the host's
    // disk per launch.
    UniqueFd config_fd(::memfd_create("maf-sandbox-config", MFD_CLOEXEC));
    if (!config_fd) {
        throw SystemError(errno, "creating the supervisor's config memfd");
    }
    if (const int error = write_whole(config_fd.get(), json::serialize(to_json(config)));
        error != 0 || ::lseek(config_fd.get(), 0, SEEK_SET) != 0) {
        throw SystemError(error != 0 ? error : errno, "writing the supervisor's config");
    }

    // Prepared before the spawn: the child only makes async-signal-safe calls. argv[0] is the
    // bare name, never the executable's host path (which PID 1's cmdline would show).
    const std::string exe = executable.string();
    char name[] = "maf-sandbox-supervisor";
    char* const argv[] = {name, nullptr};
    char* const envp[] = {nullptr};

    int ready[2];
    if (::pipe2(ready, O_CLOEXEC) != 0) {
        throw SystemError(errno, "creating the supervisor's ready pipe");
    }
    UniqueFd ready_read(ready[0]);
    UniqueFd ready_write(ready[1]);
    // A socket, not a pipe: a supervisor that failed before reading must not SIGPIPE us.
    int placement[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, placement) != 0) {
        throw SystemError(errno, "creating the supervisor's cgroup channel");
    }
    UniqueFd placement_read(placement[0]);
    UniqueFd placement_write(placement[1]);
    // Without a claim the supervisor's claim descriptor is /dev/null: it holds no lock.
    UniqueFd no_claim;
    if (!claim) {
        no_claim = UniqueFd(::open("/dev/null", O_RDONLY | O_CLOEXEC));
    }
    const SupervisorSpawn spawn{exe.c_str(),
                                argv,
                                envp,
                                ready_write.get(),
                                placement_read.get(),
                                config_fd.get(),
                                claim ? claim->lock_fd() : no_claim.get()};
    const pid_t child = spawn_supervisor(spawn);
    if (child < 0) {
        throw SystemError(errno, "starting the sandbox's supervisor (clone)");
    }
    rollback.child = child;
    ready_write.reset();
    placement_read.reset();
    // Meanwhile the supervisor starts. On failure placement_write closes first (declared after
    // the rollback): the supervisor gives up and the rollback reaps it.
    // Rootless: no cgroup (none is writable by the user here); the limits that need one were
    // refused before the launch (rootless_controls.hpp), and the placement is empty.
    CgroupPlacement placement_line;
    if (!rootless) {
        cgroup = SandboxCgroup::create(launch.id, launch.limits, root_uid, root_uid);
        handle.cgroup_layout = cgroup->layout();
        handle.cgroups = cgroup->paths();
        placement_line = CgroupPlacement{cgroup->layout(), cgroup->delegated_dirs(),
                                         cgroup->join_files(), cgroup->oom_kill_count_file()};
    }
    const std::string line = to_line(placement_line);
    // A failed send means the supervisor is gone already; its report says why.
    [[maybe_unused]] const auto sent =
        ::send(placement_write.get(), line.data(), line.size(), MSG_NOSIGNAL);
    placement_write.reset();
    const auto started = [&](pid_t pid) {
        const auto start = live_process_start_time(pid);
        if (!start) {
            throw SystemError(
                ESRCH,
                fmt::format("the supervisor of sandbox {} exited right after starting", launch.id));
        }
        handle.pid = pid;
        handle.start_time = *start;
        if (launch.on_started) {
            launch.on_started(handle);
        }
    };
    const Report report =
        read_report(ready_read.get(), SteadyClock::now() + launch.ready_timeout, started);
    if (!report.ready || report.pid <= 0) {
        // The supervisor names the errors that are the caller's to act on (egress, bad input).
        constexpr std::string_view kEgressRefusal = "SandboxEgressNotEnforced: ";
        constexpr std::string_view kBadInput = "InvalidArgument: ";
        if (report.error.starts_with(kEgressRefusal)) {
            throw SandboxEgressNotEnforced(report.error.substr(kEgressRefusal.size()));
        }
        if (report.error.starts_with(kBadInput)) {
            throw InvalidArgument(report.error.substr(kBadInput.size()));
        }
        throw SystemError(EIO,
                          fmt::format("starting the sandbox {}: {}", launch.id,
                                      report.error.empty() ? "no report" : report.error),
                          "run as root on a kernel with user namespaces, overlayfs and cgroups");
    }
    rollback.armed = false;
    if (claim) {
        claim->commit();  // PID 1 holds its lock from here on
    }
    return handle;  // the rollback reaps the host-side half, which is exiting by now
}

std::string recorded_sandbox_id(const SandboxHandle& handle) {
    return handle.sandbox_id.empty() ? handle.sandbox_dir.filename().string() : handle.sandbox_id;
}

void check_recorded_handle(const SandboxHandle& handle, const fs::path& sandboxes_root,
                           std::string_view expected_id) {
    const std::string id = recorded_sandbox_id(handle);
    const auto refuse = [&](std::string_view what, const fs::path& value) {
        throw InvalidArgument(fmt::format(
            "the recorded sandbox {} names {} '{}', which is not its own beneath {}; the record "
            "is damaged or forged, so it is not acted on (remove it by hand after checking)",
            id, what, value.string(), sandboxes_root.string()));
    };
    // As Registry::is_id: 16 to 64 lowercase hex digits (so never "..", a slash or empty).
    const bool hex = std::all_of(id.begin(), id.end(), [](char c) {
        return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
    });
    if (!hex || id.size() < 16 || id.size() > 64 || (!expected_id.empty() && id != expected_id)) {
        refuse("the id", id);
    }
    const fs::path dir = sandboxes_root.lexically_normal() / id;
    if (handle.sandbox_dir != dir) {
        refuse("the directory", handle.sandbox_dir);
    }
    if (handle.socket != dir / "exec.sock") {
        refuse("the exec socket", handle.socket);
    }
    for (const auto& cgroup : handle.cgroups) {
        if (!is_sandbox_cgroup(cgroup, id)) {
            refuse("the cgroup", cgroup);
        }
    }
}

void destroy_sandbox(const SandboxHandle& handle) {
    const std::string id = recorded_sandbox_id(handle);
    // Whatever the caller checked: only the sandbox's own cgroups are emptied and removed.
    for (const auto& path : handle.cgroups) {
        if (!is_sandbox_cgroup(path, id)) {
            throw InvalidArgument(fmt::format(
                "refusing to destroy sandbox {}: '{}' is not its cgroup (a damaged record?)", id,
                path.string()));
        }
    }
    auto cgroup = SandboxCgroup::attach(handle.cgroup_layout, handle.cgroups);
    // A paused sandbox is thawed first: a v1 freezer holds even SIGKILL, so a frozen PID 1 would
    // only die once the cgroup teardown thawed it, after end_pid1 had waited out its whole grace.
    thaw_before_kill(*cgroup);
    end_pid1(handle.pid, handle.start_time, id, std::chrono::seconds(5));
    // Then everything else in its cgroups (kill_all), and the cgroups themselves.
    cgroup->destroy();
    if (!handle.sandbox_dir.empty()) {
        // By descriptor, never following a link; a mount left inside is refused, not entered.
        detail::remove_host_tree(handle.sandbox_dir, true);
    }
    // Last: nothing of the sandbox runs any more, so its host ids can go to the next one.
    std::error_code ec;
    if (!handle.id_claims_dir.empty() && !handle.sandbox_id.empty() &&
        fs::is_directory(handle.id_claims_dir, ec)) {  // a recorded path is never made
        IdClaims(handle.id_claims_dir).release(handle.ids.host_base, handle.sandbox_id);
    }
}

UniqueFd open_sandbox_root(const SandboxHandle& handle) {
    UniqueFd fd(
        ::open(fmt::format("/proc/{}/root", handle.pid).c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
    // Checked after the open: if the pid was reused in between, the start time no longer matches;
    // and a recorded pid is the sandbox's only while it is in the sandbox's cgroup.
    if (!fd || !sandbox_alive(handle) ||
        !process_in_sandbox_cgroup(handle.pid, recorded_sandbox_id(handle))) {
        throw SandboxOutputUnreachable(
            "the sandbox's supervisor is gone (expired or disposed); acquire the sandbox again");
    }
    return fd;
}

ExecReply exec_in_sandbox(const SandboxHandle& handle, const ExecCall& call) {
    return call_exec(handle.socket, call);
}

}  // namespace maf_sandbox::runtime
