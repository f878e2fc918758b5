// The guest process of one exec: its preparation, its wait for the request and its execve
// (exec_guest.hpp).
#include "exec_guest.hpp"
#include "fd_ops.hpp"

#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <map>

#include <fmt/format.h>
#include <boost/json.hpp>

#include "maf_sandbox/runtime/isolation.hpp"

#ifndef CLOSE_RANGE_CLOEXEC
#define CLOSE_RANGE_CLOEXEC (1U << 2)
#endif

namespace maf_sandbox::runtime::exec_guest {

namespace json = boost::json;

namespace {

constexpr const char* kDefaultPath = "/usr/local/bin:/usr/bin:/bin";

// The most of a request a guest process reads ahead of the handler (argv, environment, cwd and the
// rest of the request's JSON); a larger one is left to the handler, which reads it whole.
constexpr std::size_t kPeekBytes = 16 * 1024;

void put_u32(std::string& out, std::uint32_t value) {
    for (int i = 0; i < 4; ++i) {
        out.push_back(static_cast<char>((value >> (8 * i)) & 0xFF));
    }
}

std::uint32_t get_u32(std::string_view& in) {
    if (in.size() < 4) {
        return 0;
    }
    std::uint32_t value = 0;
    for (int i = 0; i < 4; ++i) {
        value |= static_cast<std::uint32_t>(static_cast<unsigned char>(in[i])) << (8 * i);
    }
    in.remove_prefix(4);
    return value;
}

bool decode(std::string_view in, Launch& launch) {
    const auto get_list = [&](std::vector<std::string>& items) {
        const auto count = get_u32(in);
        for (std::uint32_t i = 0; i < count; ++i) {
            const auto size = get_u32(in);
            if (size > in.size()) {
                return false;
            }
            items.emplace_back(in.substr(0, size));
            in.remove_prefix(size);
        }
        return true;
    };
    std::vector<std::string> cwd;
    if (!get_list(launch.argv) || !get_list(launch.candidates) || !get_list(launch.env) ||
        !get_list(cwd) || cwd.size() != 1 || launch.argv.empty()) {
        return false;
    }
    launch.cwd = std::move(cwd[0]);
    return true;
}

}  // namespace

// A length-prefixed list of length-prefixed strings per field; the guest process decodes it.
std::string encode(const Launch& launch) {
    std::string body;
    const auto put_list = [&](const std::vector<std::string>& items) {
        put_u32(body, static_cast<std::uint32_t>(items.size()));
        for (const auto& item : items) {
            put_u32(body, static_cast<std::uint32_t>(item.size()));
            body += item;
        }
    };
    put_list(launch.argv);
    put_list(launch.candidates);
    put_list(launch.env);
    put_list({launch.cwd});
    std::string out;
    put_u32(out, static_cast<std::uint32_t>(body.size()));
    return out + body;
}

// The guest's argv, environment, candidates for argv[0] and working directory for `call`.
Launch launch_for(const ExecCall& call, const SupervisorConfig& config) {
    Launch launch;
    launch.argv =
        std::holds_alternative<std::string>(call.command)
            ? std::vector<std::string>{"/bin/sh", "-c", std::get<std::string>(call.command)}
            : std::get<std::vector<std::string>>(call.command);
    if (launch.argv.empty()) {
        throw std::invalid_argument("the command is empty: give at least the program to run");
    }
    std::map<std::string, std::string> env(config.base_env.begin(), config.base_env.end());
    for (const auto& [key, value] : call.env) {
        env[key] = value;
    }
    for (const auto& [key, value] : env) {
        launch.env.push_back(key + "=" + value);
    }
    const auto& program = launch.argv[0];
    if (program.find('/') != std::string::npos) {
        launch.candidates.push_back(program);
    } else {
        const std::string search = env.count("PATH") ? env["PATH"] : std::string(kDefaultPath);
        std::string_view path = search;
        while (true) {
            const auto colon = path.find(':');
            const auto dir = path.substr(0, colon);
            launch.candidates.push_back(fmt::format("{}/{}", dir.empty() ? "." : dir, program));
            if (colon == std::string_view::npos) {
                break;
            }
            path.remove_prefix(colon + 1);
        }
    }
    launch.cwd = call.cwd.empty() ? config.default_cwd : call.cwd;
    return launch;
}

namespace {

// The launch for a request frame (header first) found at the start of `bytes`. False when the
// frame is not all there or not valid.
bool launch_from_frame(std::string_view bytes, const SupervisorConfig& config, Launch& launch) {
    const auto header = exec_wire::kFrameHeaderBytes;
    if (bytes.size() < header || bytes[0] != exec_wire::kRequest) {
        return false;
    }
    const auto size = exec_wire::frame_payload_size(bytes.data());
    if (size > bytes.size() - header) {
        return false;
    }
    try {
        launch = launch_for(exec_wire::exec_call_from_json(json::parse(bytes.substr(header, size))),
                            config);
        return true;
    } catch (const std::exception&) {
        return false;
    }
}

// Where a guest process that accepts its own connection reads the request ahead of the handler.
// (perf) Made ready before the connection comes: a page first written by this process (a forked
// copy of its handler) costs a copy-on-write or zero-fill fault, about 3 us each on this kind of
// virtual machine, and reading a request the first time took 35 of them (~120 us). So the buffer
// is written once here, and a rehearsal on a sample request leaves the allocator's free lists and
// the stack holding pages already this process's own, which the real request then reuses.
class RequestPeek {
  public:
    explicit RequestPeek(const SupervisorConfig& config) : bytes_(kPeekBytes, '\0') {
        ExecCall sample;
        sample.command = std::vector<std::string>{"true"};
        sample.env = {{"MAF_SANDBOX", "1"}};
        Launch scratch;
        launch_from_frame(exec_wire::request_prefix(sample), config, scratch);
    }

    // Reads the request without taking it off the connection (the handler reads it again, whole,
    // for its deadline, output cap and stdin) and makes the launch from it. False when it is not
    // all there in one read (large, or still arriving) or is not valid: the handler then sends the
    // launch, as when it accepts the connection itself, and reports what is wrong.
    bool launch_for_request(int connection, const SupervisorConfig& config, Launch& launch) {
        ssize_t n = 0;
        do {
            n = ::recv(connection, bytes_.data(), bytes_.size(), MSG_PEEK);
        } while (n < 0 && errno == EINTR);
        return n > 0 &&
               launch_from_frame(std::string_view(bytes_.data(), static_cast<std::size_t>(n)),
                                 config, launch);
    }

  private:
    std::string bytes_;
};

}  // namespace

// Takes the next connection off the supervisor's listener; -1 when the listener fails.
int accept_connection(int listener) noexcept {
    for (;;) {
        const int connection = ::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
        if (connection >= 0 || (errno != EINTR && errno != ECONNABORTED)) {
            return connection;
        }
    }
}

namespace {

// Async-signal-safe. While this process is not dumpable its /proc files belong to the host's
// root, not to the sandbox's, so it becomes dumpable for the one write: nothing of the guest's
// runs yet, and a guest process that could look (root inside) has no more power than this one.
bool prefer_as_oom_victim() noexcept {
    if (::prctl(PR_SET_DUMPABLE, 1, 0, 0, 0) != 0) {
        return false;
    }
    const int fd = ::open("/proc/self/oom_score_adj", O_WRONLY | O_CLOEXEC);
    const bool written = fd >= 0 && ::write(fd, "1000", 4) == 4;
    if (fd >= 0) {
        ::close(fd);
    }
    return ::prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) == 0 && written;
}

[[noreturn]] void guest_main(const ExecContext& context, const ExecCgroupParent::Child* cgroup,
                             int in, int out, int err, int fail, int command, int ready,
                             int listener, int handoff, pid_t handler) {
    const auto fail_with = [&](int stage) {
        const ChildFailure failure{stage, errno};
        [[maybe_unused]] auto n = ::write(fail, &failure, sizeof failure);
        ::_exit(127);
    };
    const auto& config = *context.config;
    sigset_t all;
    sigemptyset(&all);
    ::sigprocmask(SIG_SETMASK, &all, nullptr);
    ::signal(SIGPIPE, SIG_DFL);
    ::setsid();
    if (cgroup != nullptr && !cgroup->join_self()) {
        fail_with(0);
    }
    // Guest programs are the OOM killer's first choice: a guest filling memory (its tmpfs layers
    // are charged to the sandbox's cgroup too) must not get PID 1 killed. Raising the score needs
    // no privilege; lowering the supervisor's would need CAP_SYS_RESOURCE, which hosts like this
    // one do not grant. A guest may lower itself back to 0: then it can only kill its own sandbox.
    if (!prefer_as_oom_victim()) {
        fail_with(6);
    }
    ::dup2(in, 0);
    ::dup2(out, 1);
    ::dup2(err, 2);
    ::syscall(SYS_close_range, 3u, ~0u, CLOSE_RANGE_CLOEXEC);
    // Waits still as the sandbox's root (no bounding set, no_new_privs, filtered: PID 1's,
    // inherited) so that guest processes, which run as the guest user, cannot signal the next
    // exec's process; dumpable is off (inherited from PID 1), so they cannot read its descriptors
    // either.
    std::optional<RequestPeek> peek;
    if (listener >= 0) {
        peek.emplace(config);
    }
    // (perf) The guest's groups now, while waiting, and its user only once the launch is known:
    // signals are checked against the user, never the groups, so guest processes still cannot
    // signal this one.
    const gid_t groups[1] = {config.guest_gid};
    if (::setgroups(1, groups) != 0 ||
        ::setresgid(config.guest_gid, config.guest_gid, config.guest_gid) != 0) {
        fail_with(1);
    }
    // Never outlives its handler (the OOM killer could take one): waiting in accept, it would take
    // the next connection with nobody to hand it to. Set after the groups, whose change clears it.
    // A program the handler still answers for is never ended by it: the handler waits for the
    // program before it exits (and a switch to a guest user other than root clears it).
    if (::prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) != 0 || ::getppid() != handler) {
        ::_exit(0);
    }
    [[maybe_unused]] auto signalled = ::write(ready, "r", 1);
    ::close(ready);
    Launch launch;
    bool launching = false;
    if (peek) {
        // (perf, exec round trip) The connection wakes this process, not the handler, which would
        // then have to wake us in turn: one cross-process wake-up fewer before the program starts.
        // The handler, woken by the hand-over, supervises while the program starts.
        const int connection = accept_connection(listener);
        if (connection < 0) {
            ::_exit(0);  // the handler sees the hand-over channel close and accepts itself
        }
        launching = peek->launch_for_request(connection, config, launch);
        if (!detail::send_fd(handoff, connection, launching ? kLaunching : kAwaitLaunch)) {
            ::_exit(0);
        }
        // (perf) The hand-over channel is left to execve to close: closed here, while the
        // connection may still be in flight to the handler, it cost 25-35 us; the handler closes
        // its end as soon as it has the connection, and execve then closes ours for free.
        ::close(connection);
        ::close(listener);
    }
    if (!launching) {
        launch = Launch{};
        char header[4];
        if (!detail::read_exact(command, header, sizeof header)) {
            ::_exit(0);  // the handler went away before using us
        }
        std::string_view header_view(header, sizeof header);
        std::string body(get_u32(header_view), '\0');
        if (!detail::read_exact(command, body.data(), body.size()) || !decode(body, launch)) {
            ::_exit(0);
        }
    }
    ::close(command);
    if (::setresuid(config.guest_uid, config.guest_uid, config.guest_uid) != 0) {
        fail_with(1);
    }
    if (!drop_all_capabilities()) {
        fail_with(2);
    }
    if (::chdir(launch.cwd.c_str()) != 0) {
        fail_with(3);
    }
    std::vector<char*> argv;
    for (auto& arg : launch.argv) {
        argv.push_back(arg.data());
    }
    argv.push_back(nullptr);
    std::vector<char*> env;
    for (auto& line : launch.env) {
        env.push_back(line.data());
    }
    env.push_back(nullptr);
    int exec_error = ENOENT;
    for (const auto& candidate : launch.candidates) {
        // (perf) A PATH entry without the program is skipped with a lookup: a failed execve
        // first builds the new program's memory and copies argv and the environment into it
        // (three misses before /usr/bin were 30-60 us of each `true`). Whatever exists is still
        // left to execve to judge, as execvp does.
        if (launch.candidates.size() > 1 &&
            ::faccessat(AT_FDCWD, candidate.c_str(), F_OK, AT_EACCESS) != 0 &&
            (errno == ENOENT || errno == ENOTDIR)) {
            continue;
        }
        ::execve(candidate.c_str(), argv.data(), env.data());
        if (errno != ENOENT && errno != ENOTDIR) {
            exec_error = errno;
            if (errno != EACCES) {
                break;
            }
        }
    }
    errno = exec_error;
    fail_with(5);
    ::_exit(127);
}

}  // namespace

// Creates the exec's cgroup and pipes and forks the guest process, which waits for its launch from
// the handler, or, given the supervisor's `listener`, accepts the next connection itself and hands
// it over on `handoff_fd`. Throws on failure.
Guest prepare_guest(const ExecContext& context, int listener) {
    static std::atomic<unsigned> counter{0};
    Guest guest;
    if (!context.cgroups->empty()) {
        // Unique even when a handler's pid is reused while an older exec's cgroup of that pid is
        // still being removed (joining a cgroup mid-removal fails with ENODEV).
        const auto stamp = std::chrono::steady_clock::now().time_since_epoch().count();
        guest.cgroup = context.cgroups->make_child(
            fmt::format("exec-{}-{}-{:x}", ::getpid(), counter++, stamp));
    }
    int in[2], out[2], err[2], fail[2], command[2], ready[2];
    if (::pipe2(in, O_CLOEXEC) != 0 || ::pipe2(out, O_CLOEXEC) != 0 ||
        ::pipe2(err, O_CLOEXEC) != 0 || ::pipe2(fail, O_CLOEXEC) != 0 ||
        ::pipe2(command, O_CLOEXEC) != 0 || ::pipe2(ready, O_CLOEXEC) != 0) {
        throw std::runtime_error(fmt::format("creating pipes: {}", std::strerror(errno)));
    }
    int handoff[2] = {-1, -1};
    if (listener >= 0 && ::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, handoff) != 0) {
        throw std::runtime_error(fmt::format("creating a socket pair: {}", std::strerror(errno)));
    }
    const pid_t handler = ::getpid();
    const pid_t child = ::fork();
    if (child < 0) {
        throw std::runtime_error(fmt::format("fork: {}", std::strerror(errno)));
    }
    if (child == 0) {
        guest_main(context, guest.cgroup ? &*guest.cgroup : nullptr, in[0], out[1], err[1], fail[1],
                   command[0], ready[1], listener, handoff[1], handler);
    }
    for (const int fd : {in[0], out[1], err[1], fail[1], command[0], ready[1], handoff[1]}) {
        if (fd >= 0) {
            ::close(fd);
        }
    }
    guest.handoff_fd = UniqueFd(handoff[0]);
    guest.pid = child;
    guest.stdin_fd = UniqueFd(in[1]);
    guest.stdout_fd = UniqueFd(out[0]);
    guest.stderr_fd = UniqueFd(err[0]);
    guest.failure_fd = UniqueFd(fail[0]);
    guest.command_fd = UniqueFd(command[1]);
    guest.ready_fd = UniqueFd(ready[0]);
    guest.pidfd = UniqueFd(static_cast<int>(::syscall(SYS_pidfd_open, child, 0)));
    return guest;
}

// True when a guest prepared earlier is still waiting for its Launch (guest processes cannot
// signal it, but the kernel's OOM killer or a sandbox-wide kill can end it meanwhile).
bool still_waiting(const Guest& guest) {
    pollfd fds[1] = {{guest.pidfd.get(), POLLIN, 0}};
    return guest.pid > 0 && ::poll(fds, 1, 0) == 0;
}

void discard(Guest& guest) {
    if (guest.pid > 0) {
        ::kill(guest.pid, SIGKILL);
        ::waitpid(guest.pid, nullptr, 0);
    }
    if (guest.cgroup) {
        guest.cgroup->remove();
    }
    guest = Guest{};
}

}  // namespace maf_sandbox::runtime::exec_guest
