// The supervisor: its host-side half (root filesystem, socket, namespaces, id maps) and the
// sandbox's PID 1 (accepts exec connections, reaps orphans, enforces the lifecycle policy).
#include "supervisor.hpp"

#include <fcntl.h>
#include <grp.h>
#include <malloc.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <optional>
#include <set>
#include <sstream>

#include <fmt/format.h>
#include <boost/json.hpp>

#include "../kernel/loopback_namespace.hpp"
#include "exec_server.hpp"
#include "guest_network.hpp"
#include "maf_sandbox/core/errors.hpp"
#include "maf_sandbox/runtime/kernel/host_budgets.hpp"
#include "maf_sandbox/runtime/kernel/isolation.hpp"
#include "maf_sandbox/runtime/kernel/unique_fd.hpp"
#include "owner_watch.hpp"

namespace maf_sandbox::runtime {

namespace fs = std::filesystem;
namespace json = boost::json;

// --- PID 1 --------------------------------------------------------------------------------------

namespace {

void report(std::string_view line) {
    const std::string text = std::string(line) + "\n";
    [[maybe_unused]] auto n = ::write(kReadyFd, text.data(), text.size());
}

[[noreturn]] void run_pid1(const SupervisorConfig& config, int listener,
                           const ExecCgroupParent& cgroups,
                           const std::vector<sock_filter>& seccomp) {
    using Clock = std::chrono::steady_clock;
    sigset_t mask;
    sigemptyset(&mask);
    sigaddset(&mask, SIGCHLD);
    sigaddset(&mask, SIGTERM);
    sigaddset(&mask, SIGINT);
    sigaddset(&mask, SIGHUP);
    ::sigprocmask(SIG_BLOCK, &mask, nullptr);
    ::signal(SIGPIPE, SIG_IGN);
    UniqueFd signals(::signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK));
    // (perf, exec round trip) PID 1 confines itself once, as every guest process must be: an
    // empty capability bounding set, no_new_privs and the seccomp filter are inherited through
    // each fork, so handlers and guests no longer pay ~40 prctl calls and a filter's validation
    // and JIT per exec (a visible share of the CPU in a tight exec loop). Nothing PID 1 or a
    // handler does from here on (fork, cgroup files, pipes, sockets, setresuid, capset, execve) is
    // among the denied calls.
    if (!drop_bounding_set() || !install_seccomp(seccomp)) {
        report(
            fmt::format("error: confining the sandbox's PID 1 (capability bounding set, "
                        "seccomp filter): {}",
                        std::strerror(errno)));
        std::_Exit(1);
    }
    // (density) Heap pages freed since start-up (the parsed config, the root's plan) go back to
    // the kernel before the spare handler and its guest are forked from us: less memory per idle
    // sandbox (bench `density`; the figure is in BENCHMARKS.md).
    ::malloc_trim(0);

    constexpr auto kSpareDelay = std::chrono::milliseconds(3);
    constexpr auto kSpareRetry = std::chrono::milliseconds(50);
    const auto started = Clock::now();
    auto last_activity = started;
    std::set<pid_t> handlers;
    const ExecContext context{&config, &cgroups};

    // (perf) Connections are accepted by spare handlers forked ahead of time, each of which has
    // already prepared its guest process (serve_next_exec); a spare tells us on `accepted` when it
    // took a connection (an AcceptedNote), and we fork its successor. A spare is not an active
    // handler until then, so it never holds off the idle timeout.
    int accepted_pipe[2];
    if (::pipe2(accepted_pipe, O_CLOEXEC) != 0) {
        std::_Exit(1);
    }
    UniqueFd accepted(accepted_pipe[0]);
    UniqueFd accepted_write(accepted_pipe[1]);
    ::fcntl(accepted.get(), F_SETFL, O_NONBLOCK);
    // (perf, exec round trip) Two spares once the sandbox has served its first exec: an exec that
    // follows the last one closely (an agent's burst of commands, the bench's tight loop) finds
    // the second spare ready instead of waiting in the listen queue for the first one's successor
    // to prepare its guest. Only one at start, so the sandbox's first exec never competes with a
    // second spare's preparation. A spare is cheap: a fork sharing PID 1's pages.
    constexpr std::size_t kSpares = 2;
    std::size_t spare_target = 1;
    std::set<pid_t> spares;
    auto spare_due = started;  // successors wait for the running exec, or until this
    auto spare_died_at = started - kSpareRetry;
    // (perf) The host is told "ready" as soon as the first spare is forked, not once it has
    // prepared its guest process (note 'p'): the host's remaining work (its record, returning to
    // the caller, the first request) then overlaps the preparation, which the first exec waits
    // for in accept only if it is not done by then, and a create that is disposed unused never
    // waits for it at all.
    bool ready_reported = false;
    const auto report_ready = [&] {
        if (!ready_reported) {
            ready_reported = true;
            report("ready");
            ::close(kReadyFd);
        }
    };
    const auto fork_spare = [&] {
        const pid_t pid = ::fork();
        if (pid == 0) {
            ::sigprocmask(SIG_UNBLOCK, &mask, nullptr);
            signals.reset();
            accepted.reset();
            if (!ready_reported) {
                ::close(kReadyFd);  // only PID 1 answers the host
            }
            try {
                serve_next_exec(listener, accepted_write.get(), context);
            } catch (...) {
                std::_Exit(1);
            }
            std::_Exit(0);
        }
        if (pid > 0) {
            spares.insert(pid);
        }
    };

    fork_spare();
    report_ready();
    for (;;) {
        const auto now = Clock::now();
        std::optional<Clock::time_point> wake;
        if (config.max_lifetime) {
            wake = started + *config.max_lifetime;
        }
        if (config.idle_timeout && handlers.empty()) {
            const auto idle_end = last_activity + *config.idle_timeout;
            wake = wake ? std::min(*wake, idle_end) : idle_end;
        }
        if (wake && now >= *wake) {
            std::_Exit(0);  // the kernel ends every process of the PID namespace with us
        }
        int timeout = -1;
        const auto wake_at = [&](Clock::time_point at) {
            const auto wait = static_cast<int>(
                std::chrono::duration_cast<std::chrono::milliseconds>(at - now).count() + 1);
            timeout = timeout < 0 ? wait : std::min(timeout, wait);
        };
        if (wake) {
            wake_at(*wake);
        }
        if (spares.size() < spare_target) {
            // (perf) A successor is forked once the running execs are answered (their handlers
            // have exited) or kSpareDelay after the last accept, whichever comes first: preparing
            // it (a fork, two cgroup joins) then does not compete for the CPU with the guest
            // process it stands in for. A spare that died before accepting (it should not) is
            // replaced at most every kSpareRetry.
            const auto due =
                std::max(handlers.empty() ? now : spare_due, spare_died_at + kSpareRetry);
            if (now >= due) {
                // Live handlers' and spares' cgroups are spared: a spare's guest may not have
                // joined its own yet.
                std::set<pid_t> live = handlers;
                live.insert(spares.begin(), spares.end());
                cgroups.remove_empty_children(live);
                while (spares.size() < spare_target) {
                    const auto before = spares.size();
                    fork_spare();
                    if (spares.size() == before) {
                        spare_died_at = now;  // fork failed: retry later
                        break;
                    }
                }
            } else {
                wake_at(due);
            }
        }
        pollfd fds[2] = {{accepted.get(), POLLIN, 0}, {signals.get(), POLLIN, 0}};
        if (::poll(fds, 2, timeout) < 0 && errno != EINTR) {
            std::_Exit(1);
        }
        // Notes first: a handler that has already exited wrote its note before, and must not be
        // taken for a spare that died.
        if (fds[0].revents & POLLIN) {
            AcceptedNote note{};
            while (::read(accepted.get(), &note, sizeof note) == sizeof note) {
                if (note.what == AcceptedNote::kPrepared) {
                    report_ready();
                    continue;
                }
                if (spares.erase(note.handler) > 0) {
                    handlers.insert(note.handler);
                }
                last_activity = Clock::now();
                spare_due = last_activity + kSpareDelay;
                spare_target = kSpares;
            }
        }
        if (fds[1].revents & POLLIN) {
            signalfd_siginfo info{};
            while (::read(signals.get(), &info, sizeof info) == sizeof info) {
                if (info.ssi_signo == SIGTERM || info.ssi_signo == SIGINT ||
                    info.ssi_signo == SIGHUP) {
                    std::_Exit(0);
                }
            }
            // Orphans of every exec land here: reap them all.
            for (;;) {
                const pid_t pid = ::waitpid(-1, nullptr, WNOHANG);
                if (pid <= 0) {
                    break;
                }
                if (handlers.erase(pid) > 0) {
                    last_activity = Clock::now();
                }
                if (spares.erase(pid) > 0) {
                    spare_died_at = Clock::now();
                    report_ready();  // execs are then prepared on demand
                }
            }
        }
    }
}

// PID 1's recipe: the sandbox's init confines itself in this order, each step needing what the
// one before it still had.
//   1. wait for `go`: the host-side half has written the id maps and placed the cgroups;
//   2. bind the working directory onto itself and enter the copy: the host-side half entered
//      the sandbox's root as root before the clone, so no host path is resolved here;
//   3. become root of the sandbox's user namespace, with no supplementary groups;
//   4. write the user namespace's limits, before any capability is dropped;
//   5. enter_root: pivot_root, a fresh /proc with its masks, the host's root detached (nothing of
//      the host stays reachable by path);
//   6. hostname, loopback, the guest network's inside half (the proxy takes its listener);
//   7. not dumpable: guest processes of the same uid read neither its memory nor descriptors;
//   8. run_pid1: the empty bounding set, no_new_privs and the seccomp filter, once, inherited by
//      every handler and guest forked from here (exec_guest.cpp's hand-over drops the rest).
[[noreturn]] void sandbox_init(const SupervisorConfig& config, int listener,
                               const ExecCgroupParent& cgroups,
                               const std::vector<sock_filter>& seccomp, GuestNetwork& network,
                               int go) {
    try {
        // 1.
        char byte = 0;
        if (::read(go, &byte, 1) != 1) {
            std::_Exit(1);  // the host-side half failed and already reported why
        }
        ::close(go);
        // 2. The working directory is the sandbox's root: the host-side half entered it as root
        // before the clone, and the kernel carried it over into this mount namespace's copy. No
        // host path is resolved here: this process is the sandbox's own host uid, and the state
        // directory is root's alone (0700). The root arrives as a locked mount (copied from a
        // more privileged namespace), which pivot_root refuses; a copy of it attached on top of
        // itself here is ours.
        const UniqueFd tree{
            ::open_tree(AT_FDCWD, ".", OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_RECURSIVE)};
        if (!tree || ::move_mount(tree.get(), "", AT_FDCWD, ".", MOVE_MOUNT_F_EMPTY_PATH) != 0 ||
            ::fchdir(tree.get()) != 0) {
            throw SystemError(errno, "binding the sandbox's root onto itself");
        }
        // 3.
        if (::setresgid(0, 0, 0) != 0 || ::setgroups(0, nullptr) != 0 ||
            ::setresuid(0, 0, 0) != 0) {
            throw SystemError(errno, "becoming root of the sandbox's user namespace");
        }
        // 4. As the namespace's root, before any capability is dropped; the host's /proc still
        // names this user namespace's limits (they follow the writer, not the mount).
        write_user_namespace_limits(config.budgets.namespace_limits);
        enter_root();  // 5.
        // 6.
        set_hostname(config.hostname);
        bring_up_loopback();
        network.start_inside();
        // 7. Guest processes of the same uid must not read our memory or descriptors.
        ::prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
        // 8. "ready" is reported by run_pid1 once the first exec's spare handler is forked.
        run_pid1(config, listener, cgroups, seccomp);
    } catch (const std::exception& e) {
        report(fmt::format("error: {}", e.what()));
        std::_Exit(1);
    }
}

// Waits for the launcher's CgroupPlacement on kCgroupFd, joins it (this process has one thread:
// the join file moves only the writer) and records it in the config.
void join_placed_cgroups(SupervisorConfig& config) {
    std::string line;
    char chunk[512];
    while (line.find('\n') == std::string::npos) {
        const ssize_t n = ::read(kCgroupFd, chunk, sizeof chunk);
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n <= 0) {
            throw SystemError(n == 0 ? EPIPE : errno,
                              "receiving the sandbox's cgroups from the launcher (it gave up)");
        }
        line.append(chunk, static_cast<std::size_t>(n));
    }
    ::close(kCgroupFd);
    auto placement = cgroup_placement_from_line(std::string_view(line).substr(0, line.find('\n')));
    config.cgroup_layout = placement.layout;
    config.delegated_cgroups = std::move(placement.delegated);
    config.oom_kill_count_file = std::move(placement.oom_kill_count_file);
    for (const auto& file : placement.join_files) {
        UniqueFd fd(::open(file.c_str(), O_WRONLY | O_CLOEXEC));
        if (!fd || ::write(fd.get(), "0", 1) != 1) {
            throw SystemError(errno, fmt::format("joining the sandbox's cgroup {}", file.string()));
        }
    }
}

// The config: from kConfigFd (how the runtime passes it, so no host path is on PID 1's command
// line), or from a file named by hand.
std::string read_config(const char* path) {
    if (path != nullptr) {
        std::ifstream in(path);
        std::stringstream text;
        text << in.rdbuf();
        return text.str();
    }
    std::string text;
    char chunk[4096];
    for (;;) {
        const ssize_t n = ::read(kConfigFd, chunk, sizeof chunk);
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n < 0) {
            throw SystemError(errno, "reading the supervisor's config from its descriptor");
        }
        if (n == 0) {
            break;
        }
        text.append(chunk, static_cast<std::size_t>(n));
    }
    ::close(kConfigFd);  // PID 1 and the guest must not inherit it
    return text;
}

UniqueFd listen_on(const fs::path& socket_path) {
    ::unlink(socket_path.c_str());
    UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    const auto path = socket_path.string();
    if (path.size() >= sizeof address.sun_path) {
        throw InvalidArgument(
            fmt::format("the socket path {} is longer than {} bytes; use a shorter state directory",
                        path, sizeof address.sun_path - 1));
    }
    std::memcpy(address.sun_path, path.c_str(), path.size() + 1);
    if (!fd || ::bind(fd.get(), reinterpret_cast<sockaddr*>(&address), sizeof address) != 0 ||
        ::chmod(path.c_str(), 0600) != 0 || ::listen(fd.get(), 128) != 0) {
        throw SystemError(errno, fmt::format("listening on {}", path));
    }
    return fd;
}

}  // namespace

int supervisor_main(int argc, char** argv) {
    if (argc > 2) {
        std::fprintf(stderr,
                     "usage: maf-sandbox-supervisor [CONFIG.json] (started by the runtime, which "
                     "passes the config on fd %d)\n",
                     kConfigFd);
        return 2;
    }
    // The claim's lock goes to PID 1 with the clone, never to a program it or we execute.
    ::fcntl(kIdClaimFd, F_SETFD, FD_CLOEXEC);
    try {
        SupervisorConfig config =
            supervisor_config_from_json(json::parse(read_config(argc == 2 ? argv[1] : nullptr)));
        // First, while this process is in none of the sandbox's namespaces or cgroups: PID 1
        // inherits the life pipe's write end through the clone below.
        const UniqueFd owner_watch = start_owner_watch(config);
        // Closed egress: the network namespace is made beside the mounts (loopback_namespace.hpp).
        std::optional<PendingLoopbackNamespace> loopback;
        if (config.egress.mode == Egress::closed) {
            loopback.emplace(PendingLoopbackNamespace::start());
        }
        // The egress proxy, forked below, must be inside the sandbox's cgroups (limits, kill).
        const bool joins_first = config.egress.mode != Egress::closed;
        if (joins_first) {
            join_placed_cgroups(config);
        }
        // First, while this process is still in the host's mount namespace: the egress proxy
        // forked here never sees the sandbox's mounts.
        GuestNetwork network = GuestNetwork::prepare(config);
        // The root is opened here, as root: PID 1 enters it through this descriptor (as its
        // working directory across the clone below), never by the host path.
        const fs::path root = prepare_root(config.mounts, config.sandbox_dir);
        const UniqueFd root_dir{
            ::open(root.c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)};
        if (!root_dir) {
            throw SystemError(errno, "opening the sandbox's root");
        }
        UniqueFd listener = listen_on(config.socket_path);
        if (!joins_first) {
            join_placed_cgroups(config);
        }
        const ExecCgroupParent cgroups = ExecCgroupParent::open(
            config.cgroup_layout, config.delegated_cgroups, config.oom_kill_count_file);
        const std::vector<sock_filter>& seccomp = config.seccomp;
        int go[2];
        if (::pipe2(go, O_CLOEXEC) != 0) {
            throw SystemError(errno, "creating the start pipe");
        }
        unsigned long namespaces = sandbox_namespace_flags();
        if (loopback) {
            // PID 1 inherits it from us instead of a network namespace of its own.
            const UniqueFd ns = loopback->take();
            if (::setns(ns.get(), CLONE_NEWNET) != 0) {
                throw SystemError(errno, "entering the sandbox's network namespace");
            }
            namespaces &= ~static_cast<unsigned long>(CLONE_NEWNET);
        }
        pid_t child = 0;
        {
            // The kernel copies the namespace's whole-sandbox signal and message queue budgets
            // from its creator's limits at creation; PID 1 inherits all three.
            const ScopedCreationLimits limits(config.budgets);
            if (::fchdir(root_dir.get()) != 0) {
                throw SystemError(errno, "entering the sandbox's root");
            }
            // Owned by the guest root's host uid, so the sandbox's per-user kernel counts are
            // charged to its own identity, not to host root.
            child = clone_with_owned_namespaces(namespaces, config.ids.to_host(0),
                                                config.ids.to_host(0));
            if (child == 0) {
                ::close(go[1]);
                ::close(root_dir.get());  // the working directory is all PID 1 needs of it
                sandbox_init(config, listener.get(), cgroups, seccomp, network, go[0]);
            }
            // Out of the sandbox's root: slirp4netns, started below, inherits our directory.
            if (::chdir("/") != 0) {
                throw SystemError(errno, "leaving the sandbox's root");
            }
        }
        ::close(go[0]);
        UniqueFd start(go[1]);
        write_id_maps(child, config.ids);
        network.start_outside(config, child);
        report(fmt::format("pid {}", child));
        if (::write(start.get(), "g", 1) != 1) {
            throw SystemError(errno, "starting the sandbox's PID 1");
        }
        return 0;
    } catch (const SandboxEgressNotEnforced& e) {
        // Named, so launch_sandbox raises the same refusal rather than a generic failure.
        report(fmt::format("error: {}: {}", e.type_name(), e.what()));
        return 1;
    } catch (const InvalidArgument& e) {
        report(fmt::format("error: {}: {}", e.type_name(), e.what()));
        return 1;
    } catch (const std::exception& e) {
        report(fmt::format("error: {}", e.what()));
        return 1;
    }
}

}  // namespace maf_sandbox::runtime
