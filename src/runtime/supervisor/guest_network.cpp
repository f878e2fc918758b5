// Egress beyond loopback: the egress proxy process (allowlist) and slirp4netns (unrestricted).
#include "guest_network.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <grp.h>
#include <netinet/in.h>
#include <nss.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "../egress/egress_proxy_filter.hpp"
#include "../kernel/fd_ops.hpp"
#include "../kernel/service_identity.hpp"
#include "maf_sandbox/core/errors.hpp"
#include "maf_sandbox/runtime/egress/egress.hpp"
#include "maf_sandbox/runtime/kernel/host_budgets.hpp"
#include "maf_sandbox/runtime/kernel/seccomp.hpp"
#include "maf_sandbox/runtime/wire/sandbox_files.hpp"

namespace maf_sandbox::runtime {

namespace fs = std::filesystem;

namespace {

// How long PID 1 waits for the proxy to take its listener, and the proxy for the listener.
constexpr int kHandOverMs = 10000;
constexpr int kProxyWaitMs = 30000;
// How long the host-side half waits for slirp4netns to configure the namespace.
constexpr int kSlirpReadyMs = 10000;
// slirp4netns.log's bound (RLIMIT_FSIZE on slirp4netns): it says a few lines at start and on
// errors; past this its writes fail and are lost.
constexpr std::uint64_t kSlirpLogBytes = kSlirpLogLimit;
// The hosts file the operator names is read once, as root, at sandbox start.
constexpr std::size_t kMaxHostsFileBytes = 1 << 20;
// Closes every descriptor from 3 up except `keep` (negative entries are ignored).
void close_fds_except(std::vector<int> keep) {
    std::sort(keep.begin(), keep.end());
    unsigned int next = 3;
    for (const int fd : keep) {
        if (fd < static_cast<int>(next)) {
            continue;
        }
        if (static_cast<unsigned int>(fd) > next) {
            ::syscall(SYS_close_range, next, static_cast<unsigned int>(fd) - 1, 0);
        }
        next = static_cast<unsigned int>(fd) + 1;
    }
    ::syscall(SYS_close_range, next, ~0u, 0);
}

std::string fd_path(int fd) {
    return fmt::format("/proc/self/fd/{}", fd);
}

// Waits for the proxy's listener; invalid on EOF, timeout, or when `lifetime` hangs up first (the
// sandbox is already gone).
UniqueFd receive_listener(int channel, int lifetime, int timeout_ms) {
    pollfd fds[2] = {{channel, POLLIN, 0}, {lifetime, POLLIN, 0}};
    int ready;
    do {
        ready = ::poll(fds, 2, timeout_ms);
    } while (ready < 0 && errno == EINTR);
    if (ready <= 0 || fds[1].revents != 0 || (fds[0].revents & POLLIN) == 0) {
        return UniqueFd();
    }
    char byte = 0;
    return detail::receive_fd(channel, byte);
}

// Reads one byte with a deadline; false on EOF, timeout or error.
bool read_byte(int fd, int timeout_ms, char& byte) {
    pollfd pfd{fd, POLLIN, 0};
    int ready;
    do {
        ready = ::poll(&pfd, 1, timeout_ms);
    } while (ready < 0 && errno == EINTR);
    return ready > 0 && ::read(fd, &byte, 1) == 1;
}

// The operator's hosts file as an anonymous in-memory copy: the proxy no longer runs as a user
// that can open the original (which may sit in a private directory), and the sandbox keeps the
// mapping it started with.
UniqueFd snapshot_hosts_file(const fs::path& path) {
    std::string content;
    try {
        content = detail::read_host_file(path, kMaxHostsFileBytes);
    } catch (const std::exception& e) {
        throw InvalidArgument(fmt::format(
            "MAF_SANDBOX_EGRESS_HOSTS_FILE names {}, which cannot be read ({}); fix the path or "
            "unset the variable",
            path.string(), e.what()));
    }
    UniqueFd fd(::memfd_create("maf-egress-hosts", MFD_CLOEXEC));
    if (!fd || detail::write_all(fd.get(), content) != 0) {
        throw SystemError(errno, "copying the egress hosts file for the proxy");
    }
    return fd;
}

// The last line slirp4netns wrote, for the refusal (the file goes with the sandbox directory).
std::string last_line_of(const fs::path& log) {
    std::string text;
    try {
        text = detail::read_host_file(log, 64 << 10);
    } catch (const std::exception&) {
    }
    while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) {
        text.pop_back();
    }
    const auto start = text.rfind('\n');
    text = start == std::string::npos ? text : text.substr(start + 1);
    return text.empty() ? "it reported nothing" : "it said: " + text;
}

// Writes `message` to stderr (slirp4netns's log) from a forked child, where nothing allocates.
void child_says(const char* message) noexcept {
    [[maybe_unused]] const auto written = ::write(2, message, std::strlen(message));
}

// Step 1: every descriptor but the four the proxy keeps is closed (no end of PID 1's reaches it),
// a closed peer is an error rather than SIGPIPE, and the process is named for ps.
void keep_only_proxy_descriptors(std::vector<int> keep) {
    close_fds_except(std::move(keep));
    ::signal(SIGPIPE, SIG_IGN);
    ::prctl(PR_SET_NAME, "maf-egress-proxy", 0, 0, 0);
}

// Step 2: host names resolve through /etc/hosts and DNS only, whatever nsswitch.conf lists: glibc
// has those two built in, so the supervisor, a static executable, never loads a shared NSS module
// into this process (one from another glibc build would crash it).
void resolve_names_without_nss_modules() {
    ::__nss_configure_lookup("hosts", "files dns");
}

// Steps 3 to 5 as the kernel room's service-identity calls (service_identity.hpp): a step that
// fails ends the process, which has not served anything yet.
void or_exit(bool done) {
    if (!done) {
        std::_Exit(1);
    }
}

// Step 7: takes the guest-facing listener PID 1 sends, tells PID 1 it has it, and serves until
// the sandbox ends; returns the proxy's exit status.
int serve_guest_listener(const SupervisorConfig& config, int channel, int lifetime, int log,
                         int hosts) {
    UniqueFd listener = receive_listener(channel, lifetime, kProxyWaitMs);
    if (!listener) {
        std::_Exit(1);
    }
    EgressProxyOptions options;
    options.rules = compile_allowlist(config.egress.allow);
    options.operator_options = config.egress_operator;
    if (config.budgets.proxy_nofile > 0) {
        options.max_sessions =
            std::min(options.max_sessions, egress_sessions_within(config.budgets.proxy_nofile));
    }
    options.operator_options.hosts_file.reset();
    if (hosts >= 0) {
        options.operator_options.hosts_file = fd_path(hosts);
    }
    options.decision_log = egress_log_path(config.sandbox_dir);  // names it in errors
    options.decision_log_fd = log;
    if (::write(channel, "k", 1) != 1) {
        std::_Exit(1);
    }
    ::close(channel);
    return run_egress_proxy(listener.release(), lifetime, options);
}

// The proxy process: forked by the host-side half, never returns. Everything it keeps is named
// here; every other descriptor (the ready pipe, PID 1's ends) is closed before it drops root.
// It runs as the sandbox's proxy id (no guest's, no other sandbox's), in a read-only view of the
// host's files, under its own syscall filter, and can write only `log`, up to the log's bound.
// The egress proxy's recipe, in order. A read-only, nosuid view of the host's files (it can write
// no host file by name), RLIMIT_FSIZE at the decision log's bound (the one file it writes stays
// bounded) and RLIMIT_NOFILE at its part of the sandbox's file share (host_budgets.hpp; the
// sessions it serves at once are cut to what fits in it) need root, so they come before the proxy
// user (no groups, no capabilities, no_new_privs, not dumpable). Its own seccomp filter comes
// last, so that nothing before it needs a call the filter denies, and only then does it take the
// guest's listener.
[[noreturn]] void proxy_process(const SupervisorConfig& config, int channel, int lifetime, int log,
                                int hosts) noexcept {
    int status = 1;
    try {
        keep_only_proxy_descriptors({channel, lifetime, log, hosts});             // 1.
        resolve_names_without_nss_modules();                                      // 2.
        or_exit(enter_read_only_mount_namespace());                               // 3.
        or_exit(limit_file_size(config.egress_operator.decision_log.max_bytes));  // 4.
        or_exit(config.budgets.proxy_nofile == 0 || limit_open_files(config.budgets.proxy_nofile));
        or_exit(become_service_user(config.ids.proxy_id()));                   // 5.
        install_egress_proxy_filter();                                         // 6.
        status = serve_guest_listener(config, channel, lifetime, log, hosts);  // 7.
    } catch (...) {
        status = 1;
    }
    // _Exit: the supervisor's copied state (loggers, statics) must not run its destructors here.
    std::_Exit(status);
}

}  // namespace

GuestNetwork GuestNetwork::prepare(const SupervisorConfig& config) {
    GuestNetwork network;
    network.mode_ = config.egress.mode;
    if (network.mode_ == Egress::closed) {
        return network;
    }
    int lifetime[2];
    if (::pipe2(lifetime, O_CLOEXEC) != 0) {
        throw SystemError(errno, "creating the sandbox's lifetime pipe");
    }
    network.lifetime_read_.reset(lifetime[0]);
    network.lifetime_write_.reset(lifetime[1]);
    if (network.mode_ != Egress::allowlist) {
        return network;
    }
    compile_allowlist(config.egress.allow);  // a bad entry fails here, before anything runs

    // Created here, owned by the proxy's user, and handed to the proxy open: the proxy's view of
    // the host's files is read-only.
    const fs::path log_path = egress_log_path(config.sandbox_dir);
    UniqueFd log(
        ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0600));
    const uid_t proxy_id = config.ids.proxy_id();
    if (!log || ::fchown(log.get(), proxy_id, static_cast<gid_t>(proxy_id)) != 0) {
        throw SystemError(errno,
                          fmt::format("creating the egress decision log {}", log_path.string()));
    }
    UniqueFd hosts;
    if (config.egress_operator.hosts_file) {
        hosts = snapshot_hosts_file(*config.egress_operator.hosts_file);
    }
    int pair[2];
    if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair) != 0) {
        throw SystemError(errno, "creating the channel to the egress proxy");
    }
    UniqueFd proxy_end(pair[0]);
    network.channel_.reset(pair[1]);
    const pid_t proxy = ::fork();
    if (proxy < 0) {
        throw SystemError(errno, "forking the egress proxy");
    }
    if (proxy == 0) {
        proxy_process(config, proxy_end.get(), network.lifetime_read_.get(), log.get(),
                      hosts.get());
    }
    network.lifetime_read_.reset();  // the proxy's now
    return network;
}

void GuestNetwork::start_inside() {
    lifetime_read_.reset();
    if (mode_ != Egress::allowlist) {
        return;  // lifetime_write_ stays open until PID 1 ends
    }
    UniqueFd listener(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(kGuestProxyPort);
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (!listener ||
        ::bind(listener.get(), reinterpret_cast<sockaddr*>(&address), sizeof address) != 0 ||
        ::listen(listener.get(), 512) != 0) {
        throw SystemError(
            errno, fmt::format("listening on 127.0.0.1:{} for the egress proxy", kGuestProxyPort));
    }
    if (!detail::send_fd(channel_.get(), listener.get(), 'l')) {
        throw SystemError(errno, "handing the egress proxy its listener");
    }
    listener.reset();
    char ack = 0;
    if (!read_byte(channel_.get(), kHandOverMs, ack) || ack != 'k') {
        throw SystemError(EIO, "the egress proxy did not start (it never took its listener)");
    }
    channel_.reset();
}

void GuestNetwork::start_outside(const SupervisorConfig& config, pid_t pid1) {
    channel_.reset();
    if (mode_ == Egress::unrestricted) {
        const auto executable = find_slirp4netns();
        if (!executable) {
            throw SandboxEgressNotEnforced(
                "egress 'unrestricted' needs slirp4netns, which is not installed here; install "
                "the slirp4netns package or use egress closed or allowlist");
        }
        int ready[2];
        if (::pipe2(ready, O_CLOEXEC) != 0) {
            throw SystemError(errno, "creating the slirp4netns ready pipe");
        }
        UniqueFd ready_read(ready[0]);
        UniqueFd ready_write(ready[1]);
        const fs::path log_path = slirp_log_path(config.sandbox_dir);
        UniqueFd log(
            ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600));
        // PID 1's namespaces, opened here as root: slirp4netns, no longer root, reaches its
        // network namespace through the descriptor (its own /proc/self/fd) and is placed in its
        // user namespace before the exec (become_slirp_user).
        UniqueFd userns(
            ::open(fmt::format("/proc/{}/ns/user", pid1).c_str(), O_RDONLY | O_CLOEXEC));
        UniqueFd netns(::open(fmt::format("/proc/{}/ns/net", pid1).c_str(), O_RDONLY | O_CLOEXEC));
        if (!userns || !netns) {
            throw SystemError(errno, "opening the sandbox's namespaces for slirp4netns");
        }
        // No --enable-sandbox: slirp4netns's own sandbox needs it to be uid 0 (or to become uid 0
        // of the sandbox's user namespace, which is the guest's root). The read-only mount
        // namespace below takes its place; --enable-seccomp is slirp4netns's own filter, and
        // slirp_seccomp_program is stacked under it.
        const std::vector<std::string> args{
            executable->string(),
            "--configure",
            "--mtu=65520",
            "--disable-host-loopback",  // the host's 127.0.0.1 is not "the internet"
            "--enable-seccomp",
            fmt::format("--exit-fd={}", lifetime_read_.get()),
            fmt::format("--ready-fd={}", ready_write.get()),
            "--netns-type=path",
            fd_path(netns.get()),
            "tap0"};
        std::vector<char*> argv;
        for (const auto& arg : args) {
            argv.push_back(const_cast<char*>(arg.c_str()));
        }
        argv.push_back(nullptr);
        char* const envp[] = {nullptr};
        const uid_t slirp_id = config.ids.slirp_id();
        // Compiled here: the forked child only installs it.
        const std::vector<sock_filter>& filter = slirp_seccomp_program();
        const pid_t slirp = ::fork();
        if (slirp < 0) {
            throw SystemError(errno, "forking slirp4netns");
        }
        if (slirp == 0) {
            if (log) {
                ::dup2(log.get(), 2);
            }
            if (!enter_read_only_mount_namespace(slirp_id) || !limit_file_size(kSlirpLogBytes) ||
                !become_slirp_user(slirp_id, userns.get())) {
                child_says("maf-sandbox: could not start slirp4netns as its own user\n");
                ::_exit(126);
            }
            // Under slirp4netns's own filter (--enable-seccomp), which it installs after the exec.
            if (!install_seccomp(filter)) {
                child_says("maf-sandbox: could not install slirp4netns's AIO filter\n");
                ::_exit(126);
            }
            close_fds_except({lifetime_read_.get(), ready_write.get(), netns.get()});
            for (const int fd : {lifetime_read_.get(), ready_write.get(), netns.get()}) {
                ::fcntl(fd, F_SETFD, 0);
            }
            ::execve(argv[0], argv.data(), envp);
            ::_exit(127);
        }
        ready_write.reset();
        char byte = 0;
        if (!read_byte(ready_read.get(), kSlirpReadyMs, byte) || byte != '1') {
            ::kill(slirp, SIGKILL);
            ::waitpid(slirp, nullptr, 0);
            throw SandboxEgressNotEnforced(fmt::format(
                "slirp4netns could not give the sandbox a route out ({}); use egress closed or "
                "allowlist on this host",
                last_line_of(log_path)));
        }
    }
    lifetime_read_.reset();
    lifetime_write_.reset();  // PID 1's copy is the one that counts
}

}  // namespace maf_sandbox::runtime
