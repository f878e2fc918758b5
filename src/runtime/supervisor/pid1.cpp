// The sandbox's PID 1: its recipe (sandbox_init), one named step per confinement step, and the
// service it ends in (spare exec handlers forked ahead, orphans reaped, the lifecycle policy).
#include "pid1.hpp"

#include <fcntl.h>
#include <grp.h>
#include <malloc.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <set>

#include <fmt/format.h>

#include "exec_server.hpp"
#include "maf_sandbox/core/errors.hpp"
#include "maf_sandbox/runtime/kernel/capabilities.hpp"
#include "maf_sandbox/runtime/kernel/host_budgets.hpp"
#include "maf_sandbox/runtime/kernel/mounts.hpp"
#include "maf_sandbox/runtime/kernel/namespaces.hpp"
#include "maf_sandbox/runtime/kernel/seccomp.hpp"
#include "maf_sandbox/runtime/kernel/unique_fd.hpp"

namespace maf_sandbox::runtime {

void report_to_host(std::string_view line) {
    const std::string text = std::string(line) + "\n";
    [[maybe_unused]] auto n = ::write(kReadyFd, text.data(), text.size());
}

namespace {

// The signals PID 1 answers (a child's end, and the ones that end the sandbox), taken through a
// descriptor it polls; every fork unblocks them again.
struct LifecycleSignals {
    sigset_t mask;
    UniqueFd fd;
};

LifecycleSignals block_lifecycle_signals() {
    LifecycleSignals signals{};
    sigemptyset(&signals.mask);
    sigaddset(&signals.mask, SIGCHLD);
    sigaddset(&signals.mask, SIGTERM);
    sigaddset(&signals.mask, SIGINT);
    sigaddset(&signals.mask, SIGHUP);
    ::sigprocmask(SIG_BLOCK, &signals.mask, nullptr);
    ::signal(SIGPIPE, SIG_IGN);
    signals.fd = UniqueFd(::signalfd(-1, &signals.mask, SFD_CLOEXEC | SFD_NONBLOCK));
    return signals;
}

// PID 1 confines itself once, as every guest process must be: an empty capability bounding set,
// no_new_privs and the seccomp filter are inherited through each fork, so handlers and guests
// never pay for them per exec. Nothing PID 1 or a handler does from here on (fork, cgroup files,
// pipes, sockets, setresuid, capset, execve) is among the denied calls.
void confine_once(const std::vector<sock_filter>& seccomp) {
    if (!drop_bounding_set() || !install_seccomp(seccomp)) {
        report_to_host(
            fmt::format("error: confining the sandbox's PID 1 (capability bounding set, "
                        "seccomp filter): {}",
                        std::strerror(errno)));
        std::_Exit(1);
    }
}

// Heap pages freed since start-up (the parsed config, the root's plan) go back to the kernel
// before the spare handler and its guest are forked from us: less memory per idle sandbox.
void return_startup_memory() {
    ::malloc_trim(0);
}

// PID 1's service: keeps spare exec handlers forked ahead, reaps every orphan, and ends the
// sandbox at its idle timeout, its lifetime or a terminating signal.
[[noreturn]] void serve_execs(const SupervisorConfig& config, int listener,
                              const ExecCgroupParent& cgroups, LifecycleSignals lifecycle) {
    using Clock = std::chrono::steady_clock;
    const sigset_t& mask = lifecycle.mask;
    UniqueFd& signals = lifecycle.fd;

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
            report_to_host("ready");
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

// Step 1: waits for `go`: the host-side half has written the id maps and placed the cgroups.
void wait_for_go(int go) {
    char byte = 0;
    if (::read(go, &byte, 1) != 1) {
        std::_Exit(1);  // the host-side half failed and already reported why
    }
    ::close(go);
}

// Step 2: the working directory is the sandbox's root: the host-side half entered it as root
// before the clone, and the kernel carried it over into this mount namespace's copy. No host path
// is resolved here: this process is the sandbox's own host uid, and the state directory is root's
// alone (0700). The root arrives as a locked mount (copied from a more privileged namespace),
// which pivot_root refuses; a copy of it attached on top of itself here is ours.
void take_inherited_root() {
    const UniqueFd tree{
        ::open_tree(AT_FDCWD, ".", OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_RECURSIVE)};
    if (!tree || ::move_mount(tree.get(), "", AT_FDCWD, ".", MOVE_MOUNT_F_EMPTY_PATH) != 0 ||
        ::fchdir(tree.get()) != 0) {
        throw SystemError(errno, "binding the sandbox's root onto itself");
    }
}

// Step 3: root of the sandbox's user namespace, with no supplementary groups.
// A rootless namespace of one id has setgroups denied (the kernel requires it for an
// unprivileged gid map): there the supplementary groups cannot be dropped, and stay the user's.
bool setgroups_denied() {
    char text[8] = {};
    const UniqueFd fd(::open("/proc/self/setgroups", O_RDONLY | O_CLOEXEC));
    return fd && ::read(fd.get(), text, sizeof text - 1) > 0 && std::strncmp(text, "deny", 4) == 0;
}

void become_namespace_root() {
    if (::setresgid(0, 0, 0) != 0 ||
        (::setgroups(0, nullptr) != 0 && !(errno == EPERM && setgroups_denied())) ||
        ::setresuid(0, 0, 0) != 0) {
        throw SystemError(errno, "becoming root of the sandbox's user namespace");
    }
}

// Step 6: what the kernel leaves empty in the new UTS and network namespaces, and the guest
// network's inside half (the proxy takes its listener).
void set_up_inside_network(const SupervisorConfig& config, GuestNetwork& network) {
    set_hostname(config.hostname);
    bring_up_loopback();
    network.start_inside();
}

// Step 7: guest processes of the same uid read neither PID 1's memory nor its descriptors.
void make_undumpable() {
    ::prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
}

}  // namespace

// PID 1's recipe: the sandbox's init confines itself in this order, each step needing what the
// one before it still had. The limits (step 4) are written as the namespace's root, before any
// capability is dropped; the host's /proc still names this user namespace's limits (they follow
// the writer, not the mount). enter_root (step 5) pivots, mounts a fresh /proc with its masks and
// detaches the host's root, so nothing of the host stays reachable by path. Confinement (step 9)
// is once, inherited by every handler and guest forked from here (exec_guest.cpp's hand-over
// drops the rest); "ready" is reported once the first exec's spare handler is forked.
[[noreturn]] void sandbox_init(const SupervisorConfig& config, int listener,
                               const ExecCgroupParent& cgroups,
                               const std::vector<sock_filter>& seccomp, GuestNetwork& network,
                               int go) {
    try {
        wait_for_go(go);                                               // 1.
        take_inherited_root();                                         // 2.
        become_namespace_root();                                       // 3.
        write_user_namespace_limits(config.budgets.namespace_limits);  // 4.
        enter_root();                                                  // 5.
        set_up_inside_network(config, network);                        // 6.
        make_undumpable();                                             // 7.
        auto lifecycle = block_lifecycle_signals();                    // 8.
        confine_once(seccomp);                                         // 9.
        return_startup_memory();                                       // 10.
        serve_execs(config, listener, cgroups, std::move(lifecycle));  // 11.
    } catch (const std::exception& e) {
        report_to_host(fmt::format("error: {}", e.what()));
        std::_Exit(1);
    }
}

}  // namespace maf_sandbox::runtime
