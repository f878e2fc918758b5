// One concern: the guest process of one exec, from its preparation through its wait for the
// request to its execve (exec_guest.hpp). Over 500 lines because the process's recipe is here
// whole, each step a function, with the memory it shares with its handler until execve.
#include "exec_guest.hpp"
#include "../kernel/fd_ops.hpp"
#include "../kernel/raw_syscall.hpp"

#include <fcntl.h>
#include <linux/capability.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/ioctl.h>
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
#include <utility>

#include <fmt/format.h>
#include <boost/json.hpp>

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

}  // namespace

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
        const auto call = exec_wire::exec_call_from_json(json::parse(bytes.substr(header, size)));
        if (call.tty) {
            return false;  // its terminal is the handler's to open first
        }
        launch = launch_for(call, config);
        return true;
    } catch (const std::exception&) {
        return false;
    }
}

// Where a guest process that accepts its own connection reads the request ahead of the handler.
// (perf) Made ready before the connection comes: a page first written (a page of the guest's
// stack, or one its handler still shares copy-on-write with PID 1, whose fork it is) costs a
// zero-fill or copy-on-write fault, and reading a request the first time took dozens of them.
// So the buffer is written once here, and a
// rehearsal on a sample request leaves the allocator's free lists and the stack on pages already
// written, which the real request then reuses.
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

// Takes the next connection off the supervisor's listener; -1 when the listener fails. A raw
// call, so that a guest process may use it too (exec_guest.hpp).
int accept_connection(int listener) noexcept {
    for (;;) {
        const long connection = raw::call(SYS_accept4, listener, 0, 0, SOCK_CLOEXEC);
        if (connection >= 0) {
            return static_cast<int>(connection);
        }
        if (connection != -EINTR && connection != -ECONNABORTED) {
            return -1;
        }
    }
}

// The calling process's oom_score_adj, opened for writing. While this process is not dumpable its
// /proc files belong to the host's root, not to the sandbox's, so it becomes dumpable for the
// open: no guest code runs in it, and a guest process that could look (root inside, in that
// instant) would gain nothing a guest process does not have. Writes need no more than the open.
UniqueFd open_own_oom_score_adj() {
    if (::prctl(PR_SET_DUMPABLE, 1, 0, 0, 0) != 0) {
        throw std::runtime_error(
            fmt::format("making the handler dumpable: {}", std::strerror(errno)));
    }
    UniqueFd fd(::open("/proc/self/oom_score_adj", O_WRONLY | O_CLOEXEC));
    const int open_error = errno;
    if (::prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0) {
        std::_Exit(1);  // never serve an exec with our memory readable to guest programs
    }
    if (!fd) {
        throw std::runtime_error(
            fmt::format("opening the handler's oom_score_adj: {}", std::strerror(open_error)));
    }
    return fd;
}

// What the guest process reads in its handler's memory. The handler allocates it before the
// guest starts and frees it only once the guest has left that memory (Guest's destructor).
struct GuestShared {
    Launch launch;
    // launch.argv and launch.env as execve takes them, made before the guest's raw-calls-only part.
    std::vector<char*> argv;
    std::vector<char*> env;
    std::optional<RequestPeek> peek;  // made by a guest that accepts its own connection

    void point_at_launch() {
        argv.clear();
        env.clear();
        for (auto& arg : launch.argv) {
            argv.push_back(arg.data());
        }
        argv.push_back(nullptr);
        for (auto& line : launch.env) {
            env.push_back(line.data());
        }
        env.push_back(nullptr);
    }
};

namespace {

// What prepare_guest gives the guest process; the guest copies it before it says it is ready.
struct GuestStart {
    const ExecContext* context;
    const ExecCgroupParent::Child* cgroup;
    GuestShared* shared;
    int in, out, err, fail, command, ready, listener, handoff;
    pid_t handler;
};

// Drops every capability the guest's user would still hold (all of them when the image runs its
// guest as root inside): clearing the permitted set clears the ambient set with it. The bounding
// set is empty and no_new_privs set already, by PID 1; set here again, it costs one call.
long drop_capabilities_raw() noexcept {
    __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
    __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3] = {};
    if (const long result = raw::call(SYS_capset, raw::arg(&header), raw::arg(data)); result < 0) {
        return result;
    }
    return raw::call(SYS_prctl, PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
}

// The guest's failure report: the stage and errno on the failure pipe, for the handler to name.
[[noreturn]] void fail_with(const GuestStart& start, int stage, long error) {
    const ChildFailure failure{stage, static_cast<int>(error)};
    raw::call(SYS_write, start.fail, raw::arg(&failure), sizeof failure);
    ::_exit(127);
}

// Step 1 (heap allowed: the handler waits for `ready`): a clean signal state, a session of its
// own, the exec's cgroup, its stdio, every other descriptor close-on-exec. It waits still as the
// sandbox's root (no bounding set, no_new_privs, filtered: PID 1's, inherited) so that guest
// processes, which run as the guest user, cannot signal the next exec's process; dumpable is off
// (inherited from PID 1), so they cannot read its descriptors or its memory either.
void take_exec_cgroup_and_stdio(const GuestStart& start, GuestShared& shared,
                                const SupervisorConfig& config) {
    sigset_t all;
    sigemptyset(&all);
    ::sigprocmask(SIG_SETMASK, &all, nullptr);
    ::signal(SIGPIPE, SIG_DFL);
    ::setsid();
    if (start.cgroup != nullptr && !start.cgroup->join_self()) {
        fail_with(start, 0, errno);
    }
    ::dup2(start.in, 0);
    ::dup2(start.out, 1);
    ::dup2(start.err, 2);
    ::syscall(SYS_close_range, 3u, ~0u, CLOSE_RANGE_CLOEXEC);
    if (start.listener >= 0) {
        shared.peek.emplace(config);
    }
}

// Step 2: the guest's groups now, while waiting, and its user only once the launch is known:
// signals are checked against the user, never the groups, so guest processes still cannot signal
// this one. Raw calls: glibc's wrappers would apply the change to every thread it knows of, and
// the threads it knows of are the handler's.
void take_guest_groups(const GuestStart& start, const SupervisorConfig& config) {
    const gid_t groups[1] = {config.guest_gid};
    // A rootless namespace of one id denies setgroups (pid1.cpp): the groups stay as they are.
    const bool denied = config.rootless && config.rootless->sub_count == 0;
    if (const long result = denied ? 0 : raw::call(SYS_setgroups, 1, raw::arg(groups));
        result < 0) {
        fail_with(start, 1, -result);
    }
    if (const long result =
            raw::call(SYS_setresgid, config.guest_gid, config.guest_gid, config.guest_gid);
        result < 0) {
        fail_with(start, 1, -result);
    }
}

// Step 3: never outlives its handler (the OOM killer could take one): waiting in accept, it would
// take the next connection with nobody to hand it to. Set after the groups, whose change clears
// it. A program the handler still answers for is never ended by it: the handler waits for the
// program before it exits (and a switch to a guest user other than root clears it).
void die_with_handler(const GuestStart& start) {
    if (::prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) != 0 || ::getppid() != start.handler) {
        ::_exit(0);
    }
}

// Step 4: the handler runs from here. Raw calls only, except from accept to the hand-over, while
// the handler waits for it.
void report_ready(const GuestStart& start) {
    raw::call(SYS_write, start.ready, raw::arg("r"), 1);
    raw::call(SYS_close, start.ready);
}

// Step 5: the launch, either read from a connection this process accepts itself and hands to the
// handler, or the one the handler sends on the command pipe.
const Launch& receive_launch(const GuestStart& start, GuestShared& shared,
                             const SupervisorConfig& config) {
    bool launching = false;
    if (start.listener >= 0) {
        // The connection wakes this process, not the handler, which would then have to wake us in
        // turn: one cross-process wake-up fewer before the program starts. The handler, woken by
        // the hand-over, supervises while the program starts.
        const int accepted = accept_connection(start.listener);
        if (accepted < 0) {
            ::_exit(0);  // the handler sees the hand-over channel close and accepts itself
        }
        launching = shared.peek->launch_for_request(accepted, config, shared.launch);
        if (launching) {
            shared.point_at_launch();
        }
        if (!detail::send_fd(start.handoff, accepted, launching ? kLaunching : kAwaitLaunch)) {
            ::_exit(0);
        }
        // The hand-over channel is left to execve to close: closed here, while the connection may
        // still be in flight to the handler, it waits for it; the handler closes its end as soon
        // as it has the connection, and execve then closes ours for free.
        raw::call(SYS_close, accepted);
        raw::call(SYS_close, start.listener);
    }
    if (!launching) {
        char go = 0;
        long got = 0;
        do {
            got = raw::call(SYS_read, start.command, raw::arg(&go), 1);
        } while (got == -EINTR);
        if (got != 1) {
            ::_exit(0);  // the handler went away before using us
        }
    }
    raw::call(SYS_close, start.command);
    return shared.launch;
}

// Step 6 (a tty exec only): the terminal the handler opened becomes the program's stdin, stdout,
// stderr and controlling terminal. The guest is a session leader without one (step 1's setsid),
// so the terminal's foreground group is the program's, and ^C typed into it signals the program.
void take_terminal(const GuestStart& start, const Launch& launch) {
    if (launch.tty_path.empty()) {
        return;
    }
    const long tty = raw::call(SYS_openat, AT_FDCWD, raw::arg(launch.tty_path.c_str()), O_RDWR);
    if (tty < 0) {
        fail_with(start, 7, -tty);
    }
    if (const long result = raw::call(SYS_ioctl, tty, TIOCSCTTY, 0); result < 0) {
        fail_with(start, 7, -result);
    }
    for (long fd = 0; fd < 3; ++fd) {
        if (const long result = raw::call(SYS_dup3, tty, fd, 0); result < 0) {
            fail_with(start, 7, -result);
        }
    }
    raw::call(SYS_close, tty);
}

// Step 7: the guest's user, then no capability left (clearing the permitted set clears the
// ambient one).
void become_guest_user(const GuestStart& start, const SupervisorConfig& config) {
    if (const long result =
            raw::call(SYS_setresuid, config.guest_uid, config.guest_uid, config.guest_uid);
        result < 0) {
        fail_with(start, 1, -result);
    }
    if (const long result = drop_capabilities_raw(); result < 0) {
        fail_with(start, 2, -result);
    }
}

// Step 8: the working directory, then execve of the first candidate that exists.
[[noreturn]] void exec_program(const GuestStart& start, const GuestShared& shared,
                               const Launch& launch) {
    if (const long result = raw::call(SYS_chdir, raw::arg(launch.cwd.c_str())); result < 0) {
        fail_with(start, 3, -result);
    }
    long exec_error = -ENOENT;
    for (const auto& candidate : launch.candidates) {
        // A PATH entry without the program is skipped with a lookup: a failed execve first builds
        // the new program's memory and copies argv and the environment into it. Whatever exists
        // is still left to execve to judge, as execvp does.
        if (launch.candidates.size() > 1) {
            const long found =
                raw::call(SYS_faccessat, AT_FDCWD, raw::arg(candidate.c_str()), F_OK);
            if (found == -ENOENT || found == -ENOTDIR) {
                continue;
            }
        }
        const long result = raw::call(SYS_execve, raw::arg(candidate.c_str()),
                                      raw::arg(shared.argv.data()), raw::arg(shared.env.data()));
        if (result != -ENOENT && result != -ENOTDIR) {
            exec_error = result;
            if (result != -EACCES) {
                break;
            }
        }
    }
    fail_with(start, 5, -exec_error);
}

// The guest process. Its two rules (exec_guest.hpp): the heap and errno only while the handler is
// blocked (until `ready` is written, then from accept to the hand-over), raw calls only after.
// The guest's recipe, in order (PID 1 already gave it the empty bounding set, no_new_privs and the
// seccomp filter, inherited). Steps 1 to 3 run while the handler waits for `ready`; from step 4
// on, raw calls only.
[[noreturn]] void guest_main(const GuestStart& given) {
    const GuestStart start = given;
    const auto& config = *start.context->config;
    GuestShared& shared = *start.shared;
    take_exec_cgroup_and_stdio(start, shared, config);             // 1.
    take_guest_groups(start, config);                              // 2.
    die_with_handler(start);                                       // 3.
    report_ready(start);                                           // 4.
    const Launch& launch = receive_launch(start, shared, config);  // 5.
    take_terminal(start, launch);                                  // 6.
    become_guest_user(start, config);                              // 7.
    exec_program(start, shared, launch);                           // 8.
}

int guest_entry(void* start) {
    try {
        guest_main(*static_cast<const GuestStart*>(start));
    } catch (...) {
        // Never std::terminate: abort would signal the thread its TLS names, the handler's.
        ::_exit(127);
    }
}

}  // namespace

Guest::Guest() = default;

Guest::Guest(Guest&& other) noexcept {
    take(other);
}

Guest& Guest::operator=(Guest&& other) noexcept {
    if (this != &other) {
        end();
        take(other);
    }
    return *this;
}

Guest::~Guest() {
    end();
}

// A guest not yet reaped may still be running in memory this object frees: it goes first.
void Guest::end() noexcept {
    if (pid > 0) {
        ::kill(pid, SIGKILL);
        reap();
    }
}

void Guest::take(Guest& other) noexcept {
    pid = std::exchange(other.pid, -1);
    ready = other.ready;
    cgroup = std::move(other.cgroup);
    stdin_fd = std::move(other.stdin_fd);
    stdout_fd = std::move(other.stdout_fd);
    stderr_fd = std::move(other.stderr_fd);
    failure_fd = std::move(other.failure_fd);
    command_fd = std::move(other.command_fd);
    handoff_fd = std::move(other.handoff_fd);
    pidfd = std::move(other.pidfd);
    handler_oom_score = std::move(other.handler_oom_score);
    shared = std::move(other.shared);
}

int Guest::reap() noexcept {
    int status = 0;
    if (pid > 0) {
        while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
        }
        pid = -1;
    }
    return status;
}

namespace {

// A pipe (or, for the hand-over, a socket pair): what one end writes the other reads.
struct Channel {
    UniqueFd read;
    UniqueFd write;
};

Channel make_channel(bool socket_pair) {
    int fds[2];
    if (socket_pair ? ::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, fds) != 0
                    : ::pipe2(fds, O_CLOEXEC) != 0) {
        throw std::runtime_error(fmt::format(
            "creating a {}: {}", socket_pair ? "socket pair" : "pipe", std::strerror(errno)));
    }
    return Channel{UniqueFd(fds[0]), UniqueFd(fds[1])};
}

}  // namespace

// Creates the exec's cgroup and pipes and clones the guest process onto `stack`, then waits until
// it is ready. Throws when it cannot start one.
Guest prepare_guest(const ExecContext& context, GuestStack& stack, int listener) {
    static std::atomic<unsigned> counter{0};
    Guest guest;
    guest.shared = std::make_unique<GuestShared>();
    // Guest programs are the OOM killer's first choice: a guest filling memory (its tmpfs layers
    // are charged to the sandbox's cgroup too) must not get PID 1 killed. Raising the score needs
    // no privilege; lowering the supervisor's would need CAP_SYS_RESOURCE, which hosts like this
    // one do not grant. A guest may lower itself back to 0: then it can only kill its own sandbox.
    // Set here, the guest inherits it; and because the score is its memory's, which the guest
    // shares until its execve, the handler sets its own back to 0 only after that.
    guest.handler_oom_score = open_own_oom_score_adj();
    if (::write(guest.handler_oom_score.get(), "1000", 4) != 4) {
        throw std::runtime_error(
            fmt::format("raising the OOM score to 1000: {}", std::strerror(errno)));
    }
    if (!context.cgroups->empty()) {
        // Unique even when a handler's pid is reused while an older exec's cgroup of that pid is
        // still being removed (joining a cgroup mid-removal fails with ENODEV).
        const auto stamp = std::chrono::steady_clock::now().time_since_epoch().count();
        guest.cgroup = context.cgroups->make_child(
            fmt::format("exec-{}-{}-{:x}", ::getpid(), counter++, stamp));
    }
    auto in = make_channel(false);
    auto out = make_channel(false);
    auto err = make_channel(false);
    auto fail = make_channel(false);
    auto command = make_channel(false);
    auto ready = make_channel(false);
    Channel handoff;
    if (listener >= 0) {
        handoff = make_channel(true);
    }
    GuestStart start{&context,
                     guest.cgroup ? &*guest.cgroup : nullptr,
                     guest.shared.get(),
                     in.read.get(),
                     out.write.get(),
                     err.write.get(),
                     fail.write.get(),
                     command.read.get(),
                     ready.write.get(),
                     listener,
                     handoff.write.get(),
                     ::getpid()};
    // SIGCHLD: reaped like a forked child. No CLONE_FILES, CLONE_FS or CLONE_SIGHAND: only the
    // memory is shared, so its descriptors, working directory and signal handling are its own.
    const pid_t child =
        ::clone(guest_entry, stack.bytes + GuestStack::kBytes, CLONE_VM | SIGCHLD, &start);
    const int clone_error = errno;
    // The guest's ends, and `ready`'s, so that our read sees EOF if the guest dies first.
    for (UniqueFd* end : {&in.read, &out.write, &err.write, &fail.write, &command.read,
                          &ready.write, &handoff.write}) {
        end->reset();
    }
    if (child < 0) {
        throw std::runtime_error(fmt::format("clone: {}", std::strerror(clone_error)));
    }
    guest.pid = child;
    // Blocked (no allocation, no errno) while the guest prepares: it uses the heap meanwhile.
    char byte = 0;
    ssize_t got = 0;
    do {
        got = ::read(ready.read.get(), &byte, 1);
    } while (got < 0 && errno == EINTR);
    guest.ready = got == 1;
    guest.handoff_fd = std::move(handoff.read);
    guest.stdin_fd = std::move(in.write);
    guest.stdout_fd = std::move(out.read);
    guest.stderr_fd = std::move(err.read);
    guest.failure_fd = std::move(fail.read);
    guest.command_fd = std::move(command.write);
    guest.pidfd = UniqueFd(static_cast<int>(::syscall(SYS_pidfd_open, child, 0)));
    return guest;
}

void restore_handler_oom_score(const Guest& guest) noexcept {
    [[maybe_unused]] auto written = ::write(guest.handler_oom_score.get(), "0", 1);
}

// Gives a guest waiting for its launch the `launch` and lets it go. False when it is gone.
bool send_launch(Guest& guest, const Launch& launch) {
    guest.shared->launch = launch;
    guest.shared->point_at_launch();
    return guest.ready && detail::write_all(guest.command_fd.get(), "g") == 0;
}

// True when a guest prepared earlier is still waiting for its Launch (guest processes cannot
// signal it, but the kernel's OOM killer or a sandbox-wide kill can end it meanwhile).
bool still_waiting(const Guest& guest) {
    pollfd fds[1] = {{guest.pidfd.get(), POLLIN, 0}};
    return guest.pid > 0 && ::poll(fds, 1, 0) == 0;
}

void discard(Guest& guest) {
    auto cgroup = std::move(guest.cgroup);
    guest = Guest{};  // ends its process first: a cgroup still holding it cannot be removed
    if (cgroup) {
        cgroup->remove();
    }
}

}  // namespace maf_sandbox::runtime::exec_guest
