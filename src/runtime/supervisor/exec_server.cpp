// One exec inside the sandbox, served by its handler: the program runs in a guest process
// (exec_guest.hpp) in its own child cgroup, as the guest user, without capabilities and under the
// seccomp filter; its output is streamed with a fixed buffer; its whole tree is killed on timeout
// or when the host hangs up; background processes stay alive after a normal finish.
#include "exec_server.hpp"
#include "../kernel/fd_ops.hpp"
#include "exec_guest.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>

#include <fmt/format.h>
#include <boost/json.hpp>

#include "maf_sandbox/runtime/kernel/unique_fd.hpp"
#include "maf_sandbox/runtime/wire/exec_protocol.hpp"

namespace maf_sandbox::runtime {

namespace json = boost::json;
using Clock = std::chrono::steady_clock;

namespace {

using exec_guest::accept_connection;
using exec_guest::ChildFailure;
using exec_guest::discard;
using exec_guest::Guest;
using exec_guest::GuestStack;
using exec_guest::kLaunching;
using exec_guest::Launch;
using exec_guest::launch_for;
using exec_guest::prepare_guest;
using exec_guest::send_launch;
using exec_guest::still_waiting;

constexpr std::size_t kChunk = 64 * 1024;
// After the program exits, output still in flight is collected for this long at most; a
// background process holding the pipes open must not hold the exec hostage.
constexpr auto kDrainWindow = std::chrono::milliseconds(200);
constexpr auto kDrainQuiet = std::chrono::milliseconds(20);
// The most stdin of an interactive exec held here unwritten: past it the connection is not read
// until the program takes some, so a host typing faster than the program reads waits.
constexpr std::size_t kMaxPendingStdin = 4 * exec_wire::kMaxStdinChunk;

// A tty exec's terminal: the master side of a pseudo-terminal of the sandbox's own devpts
// (mounted by PID 1 on /dev/pts), unlocked, sized, and the path of its other side for the guest.
struct Terminal {
    UniqueFd master;
    std::string peer_path;
};

Terminal open_terminal(std::uint16_t rows, std::uint16_t cols) {
    Terminal terminal;
    terminal.master = UniqueFd(::open("/dev/pts/ptmx", O_RDWR | O_NOCTTY | O_CLOEXEC));
    if (!terminal.master) {
        throw std::runtime_error(
            fmt::format("opening the sandbox's /dev/pts/ptmx: {}", std::strerror(errno)));
    }
    int unlock = 0;
    unsigned number = 0;
    if (::ioctl(terminal.master.get(), TIOCSPTLCK, &unlock) != 0 ||
        ::ioctl(terminal.master.get(), TIOCGPTN, &number) != 0) {
        throw std::runtime_error(
            fmt::format("preparing the exec's terminal: {}", std::strerror(errno)));
    }
    const winsize size{rows, cols, 0, 0};
    ::ioctl(terminal.master.get(), TIOCSWINSZ, &size);
    terminal.peer_path = fmt::format("/dev/pts/{}", number);
    return terminal;
}

struct Stream {
    UniqueFd fd;
    char type;
    std::uint64_t total = 0;
    std::uint64_t sent = 0;
};

class Exec {
  public:
    // `launched`: the prepared guest accepted the connection and is already starting the
    // request's program.
    Exec(int connection, const ExecContext& context, GuestStack& stack,
         std::optional<Guest> prepared, bool launched)
        : connection_(connection),
          context_(context),
          stack_(stack),
          prepared_(std::move(prepared)),
          launched_(launched && prepared_) {}

    void run() {
        char type = 0;
        std::string payload;
        if (!exec_wire::read_frame(connection_, type, payload, exec_wire::kMaxRequestBytes) ||
            type != exec_wire::kRequest) {
            abandon_launched();
            return;
        }
        ExecCall call;
        try {
            call = exec_wire::exec_call_from_json(json::parse(payload));
        } catch (...) {
            abandon_launched();
            throw;
        }
        if (!exec_wire::read_frame(connection_, type, call.stdin_bytes,
                                   exec_wire::kMaxStdinBytes) ||
            type != exec_wire::kStdin) {
            abandon_launched();
            return;
        }
        ExecReply reply;
        // What the program is still to read. An interactive exec's grows with each 'i' frame.
        pending_stdin_ = std::move(call.stdin_bytes);
        try {
            execute(call, reply);
        } catch (const std::exception& e) {
            reply.status = ExecStatus::failed;
            reply.message = e.what();
        }
        exec_wire::write_frame(connection_, exec_wire::kResult,
                               json::serialize(exec_wire::to_json(reply)));
        // (perf, exec round trip) The result is on its way. What is left here (removing the
        // exec's cgroup, this process's exit) must not hold up the host reading it on this CPU,
        // nor the next exec: from now on this process runs only when nothing else wants the CPU.
        // Unprivileged, and one way (BENCHMARKS.md has what it saves).
        const sched_param no_priority{};
        ::sched_setscheduler(0, SCHED_IDLE, &no_priority);
        if (guest_.cgroup && guest_.cgroup->empty()) {
            guest_.cgroup->remove();
        }
    }

  private:
    // The host hung up before its request was read whole, while the guest that accepted for us
    // may already be running the program: nobody waits for that tree any more.
    void abandon_launched() {
        if (launched_) {
            kill_tree(prepared_->cgroup, prepared_->pid);
            prepared_->reap();
        }
    }

    void execute(const ExecCall& call, ExecReply& reply) {
        Launch launch = launch_for(call, *context_.config);
        Terminal terminal;
        if (call.tty) {
            terminal = open_terminal(call.rows, call.cols);
            launch.tty_path = terminal.peer_path;
        }
        if (launched_) {
            guest_ = std::move(*prepared_);
        } else if (prepared_ && still_waiting(*prepared_) && send_launch(*prepared_, launch)) {
            guest_ = std::move(*prepared_);
        } else {
            if (prepared_) {
                discard(*prepared_);
            }
            guest_ = prepare_guest(context_, stack_);
            // Not sent when the guest died preparing; its failure pipe says why.
            [[maybe_unused]] auto sent = send_launch(guest_, launch);
        }
        prepared_.reset();
        guest_.command_fd.reset();
        guest_.handoff_fd.reset();
        const pid_t child = guest_.pid;
        UniqueFd stdin_fd = std::move(guest_.stdin_fd);
        UniqueFd failure_fd = std::move(guest_.failure_fd);
        if (terminal.master) {
            // The program reads and writes its terminal; its pipes see EOF once it has taken it.
            stdin_fd = UniqueFd(::fcntl(terminal.master.get(), F_DUPFD_CLOEXEC, 3));
            guest_.stdout_fd = std::move(terminal.master);
        }
        streams_[0] = Stream{std::move(guest_.stdout_fd), exec_wire::kStdout};
        streams_[1] = Stream{std::move(guest_.stderr_fd), exec_wire::kStderr};
        for (auto& stream : streams_) {
            ::fcntl(stream.fd.get(), F_SETFL, O_NONBLOCK);
        }
        ::fcntl(stdin_fd.get(), F_SETFL, O_NONBLOCK);
        const auto& cgroup = guest_.cgroup;
        const int pidfd = guest_.pidfd.get();
        // The kills during this exec, as the host reports them. Read here, before the program's
        // own start-up (a prepared guest's execve is under way at most), and again at its end.
        oom_kills_before_ = context_.cgroups->oom_kills();

        const auto deadline = Clock::now() + call.timeout;
        deadline_ = deadline;
        child_ = child;
        std::size_t stdin_offset = 0;
        bool stdin_open = call.interactive;
        if (pending_stdin_.empty() && !stdin_open) {
            stdin_fd.reset();
        }
        bool exited = false;
        ChildFailure failure{};
        bool failed = false;
        int status = 0;
        cap_ = call.max_output_bytes;
        tty_ = call.tty;
        stop_at_cap_ = call.kill_past_output_cap;
        // With wait_for_output_eof the exec is over only when the program has exited and every
        // holder of its stdout and stderr (background children included) has closed them.
        const auto over = [&] {
            return exited && (!call.wait_for_output_eof || (eof_[0] && eof_[1]));
        };
        while (!over()) {
            pollfd fds[6];
            int count = 0;
            const int pid_index = count;
            fds[count++] = {exited ? -1 : pidfd, POLLIN, 0};
            const int conn_index = count;
            const bool more_stdin =
                call.interactive && pending_stdin_.size() - stdin_offset < kMaxPendingStdin;
            fds[count++] = {connection_,
                            static_cast<short>(call.interactive ? (more_stdin ? POLLIN : 0)
                                                                : (POLLIN | POLLRDHUP)),
                            0};
            const int out_index = count;
            fds[count++] = {eof_[0] ? -1 : streams_[0].fd.get(), POLLIN, 0};
            const int err_index = count;
            fds[count++] = {eof_[1] ? -1 : streams_[1].fd.get(), POLLIN, 0};
            const int fail_index = failure_fd ? count : -1;
            if (failure_fd) {
                fds[count++] = {failure_fd.get(), POLLIN, 0};
            }
            const bool to_write = stdin_fd && stdin_offset < pending_stdin_.size();
            const int in_index = to_write ? count : -1;
            if (to_write) {
                fds[count++] = {stdin_fd.get(), POLLOUT, 0};
            }
            const auto left =
                std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now())
                    .count();
            if (left <= 0) {
                if (!killed_) {
                    kill_tree(cgroup, child);
                }
                if (!exited) {
                    guest_.reap();
                }
                timed_out(call, reply);
                return;
            }
            if (::poll(fds, count, static_cast<int>(std::min<long long>(left, 1000))) < 0 &&
                errno != EINTR) {
                throw std::runtime_error(fmt::format("poll: {}", std::strerror(errno)));
            }
            const short link = fds[conn_index].revents;
            if (call.interactive && (link & POLLIN)) {
                if (!take_host_frame(stdin_open, stdin_fd.get(), call.tty)) {
                    hang_up(cgroup, child);
                }
            } else if (link & (POLLIN | POLLHUP | POLLRDHUP | POLLERR)) {
                hang_up(cgroup, child);
            }
            if (fds[out_index].revents) {
                pump(streams_[0]);
            }
            if (fds[err_index].revents) {
                pump(streams_[1]);
            }
            if (in_index >= 0 && fds[in_index].revents) {
                const ssize_t n =
                    ::write(stdin_fd.get(), pending_stdin_.data() + stdin_offset,
                            std::min<std::size_t>(kChunk, pending_stdin_.size() - stdin_offset));
                if (n > 0) {
                    stdin_offset += static_cast<std::size_t>(n);
                }
                if (n < 0 && errno != EAGAIN && errno != EINTR) {
                    stdin_fd.reset();  // the program closed its stdin: the rest is dropped
                    stdin_open = false;
                }
                if (stdin_offset == pending_stdin_.size() ||
                    (call.interactive && stdin_offset >= kMaxPendingStdin)) {
                    pending_stdin_.erase(0, stdin_offset);
                    stdin_offset = 0;
                }
            }
            if (stdin_fd && !stdin_open && pending_stdin_.empty() && !call.tty) {
                stdin_fd.reset();  // the program reads EOF
            }
            if (call.kill_past_output_cap && !killed_ &&
                (streams_[0].total > cap_ || streams_[1].total > cap_)) {
                // Past the cap: the whole tree goes now (exit 137 when the program was still
                // running), and the pipes reach EOF because no writer is left.
                kill_tree(cgroup, child);
                killed_ = true;
                if (!exited) {
                    status = guest_.reap();
                    exited = true;
                }
            }
            if (!exited && (fds[pid_index].revents & POLLIN)) {
                status = guest_.reap();
                exited = true;
            }
            if (fail_index >= 0 && fds[fail_index].revents) {
                // The guest has left our memory: it ran execve, or it failed and exited. Its OOM
                // score, set while it shared our memory, was ours too: ours goes back to 0, so
                // that the OOM killer takes the program before the process answering for it.
                failed = ::read(failure_fd.get(), &failure, sizeof failure) == sizeof failure;
                failure_fd.reset();
                if (!exited) {
                    exec_guest::restore_handler_oom_score(guest_);
                }
            }
        }
        if (killed_at_deadline_) {
            // Killed while a slow host held an output frame: the program's end was the kill.
            timed_out(call, reply);
            return;
        }
        drain();
        if (failure_fd) {
            failed = ::read(failure_fd.get(), &failure, sizeof failure) == sizeof failure;
        }
        if (failed) {
            describe_failure(failure, launch.argv[0], launch.cwd, reply);
        } else {
            reply.status = ExecStatus::exited;
            reply.exit_code = WIFSIGNALED(status) ? 128 + WTERMSIG(status) : WEXITSTATUS(status);
        }
        finish(reply);
    }

    // The host hung up (or timed out itself): nobody waits for this tree any more.
    [[noreturn]] void hang_up(const std::optional<ExecCgroupParent::Child>& cgroup, pid_t child) {
        kill_tree(cgroup, child);
        guest_.reap();
        std::_Exit(0);
    }

    // One frame of an interactive exec's host: more stdin (an empty one closes it: a pipe then
    // reads EOF; a terminal stays open, its EOF is the ^D its user types), or a new window size.
    // False when the host is gone or sent what no host sends.
    bool take_host_frame(bool& stdin_open, int stdin_fd, bool tty) {
        char type = 0;
        std::string payload;
        if (!exec_wire::read_frame(connection_, type, payload, exec_wire::kMaxStdinChunk)) {
            return false;
        }
        const auto frame = exec_wire::parse_host_frame(type, payload, tty);
        if (!frame) {
            return false;
        }
        switch (frame->kind) {
            case exec_wire::HostFrame::Kind::close_stdin:
                stdin_open = false;
                break;
            case exec_wire::HostFrame::Kind::more_stdin:
                if (stdin_open) {
                    pending_stdin_ += frame->bytes;
                }
                break;
            case exec_wire::HostFrame::Kind::resize: {
                winsize size{};
                size.ws_row = frame->rows;
                size.ws_col = frame->cols;
                ::ioctl(stdin_fd, TIOCSWINSZ, &size);
                break;
            }
        }
        return true;
    }

    void timed_out(const ExecCall& call, ExecReply& reply) {
        reply.status = ExecStatus::timed_out;
        reply.message =
            fmt::format("the exec ran past its {} ms timeout; its process tree was killed",
                        call.timeout.count());
        finish(reply);
    }

    void describe_failure(const ChildFailure& failure, const std::string& program,
                          const std::string& cwd, ExecReply& reply) {
        if (failure.stage == 5) {
            // As a shell would: 127 for a missing program, 126 for one that cannot run.
            reply.status = ExecStatus::exited;
            reply.exit_code = failure.error == ENOENT ? 127 : 126;
            const auto text = fmt::format("maf-sandbox: cannot run '{}': {}\n", program,
                                          std::strerror(failure.error));
            send_text(streams_[1], text);
            return;
        }
        reply.status = ExecStatus::failed;
        reply.exit_code = -1;
        static constexpr const char* kStages[] = {
            "joining the exec's cgroup",     "switching to the guest user",
            "dropping capabilities",         "entering the working directory",
            "installing the seccomp filter", "executing",
            "raising the OOM score",         "taking the exec's terminal"};
        reply.message = failure.stage == 3
                            ? fmt::format("the working directory {} cannot be entered: {}", cwd,
                                          std::strerror(failure.error))
                            : fmt::format("{} failed: {}", kStages[failure.stage],
                                          std::strerror(failure.error));
    }

    void kill_tree(const std::optional<ExecCgroupParent::Child>& cgroup, pid_t child) {
        killed_ = true;
        if (cgroup) {
            cgroup->kill_all();
            cgroup->remove();
        } else {
            ::kill(-child, SIGKILL);
        }
    }

    // Reads what is available; keeps at most the cap per stream and only counts the rest.
    void pump(Stream& stream) {
        char buffer[kChunk];
        for (;;) {
            const ssize_t n = ::read(stream.fd.get(), buffer, sizeof buffer);
            if (n < 0 && errno == EINTR) {
                continue;
            }
            if (n <= 0) {
                // A terminal's master reads EIO once no process holds its other side.
                if (n == 0 || (n < 0 && errno == EIO)) {
                    eof_[stream.type == exec_wire::kStdout ? 0 : 1] = true;  // stop polling it
                }
                return;
            }
            send_text(stream, std::string_view(buffer, static_cast<std::size_t>(n)));
            if (stop_at_cap_ && stream.total > cap_) {
                return;  // the caller kills the tree; a flood must not keep us reading
            }
        }
    }

    // A terminal's output is sent whole (its user reads it as it comes, as on any terminal); the
    // host keeps no more than the cap of it. Pipes' output past the cap is only counted.
    void send_text(Stream& stream, std::string_view text) {
        stream.total += text.size();
        if (stream.sent < cap_ || tty_) {
            const auto keep =
                tty_ ? text.size() : std::min<std::uint64_t>(text.size(), cap_ - stream.sent);
            send_output_frame(stream.type, text.substr(0, keep));
            stream.sent += keep;
        }
    }

    // One output frame, as soon as it is read. A host that reads slowly (its caller's sink is
    // slow) fills the socket and we wait here, which in turn stops reading the program's pipes:
    // memory stays fixed on both sides. The wait must not outlast the exec's deadline, so at the
    // deadline the tree is killed (nothing more is written) and the frame is finished after, for
    // the host to read when it can. A small frame is one non-blocking send, as a blocking one was.
    // False when the host is gone.
    bool send_output_frame(char type, std::string_view payload) {
        const auto header =
            exec_wire::frame_header(type, static_cast<std::uint32_t>(payload.size()));
        std::size_t done = 0;
        const std::size_t total = header.size() + payload.size();
        while (done < total) {
            iovec parts[2];
            int count = 0;
            if (done < header.size()) {
                parts[count++] = {const_cast<char*>(header.data()) + done, header.size() - done};
                parts[count++] = {const_cast<char*>(payload.data()), payload.size()};
            } else {
                const auto offset = done - header.size();
                parts[count++] = {const_cast<char*>(payload.data()) + offset,
                                  payload.size() - offset};
            }
            msghdr message{};
            message.msg_iov = parts;
            message.msg_iovlen = static_cast<std::size_t>(count);
            const ssize_t n = ::sendmsg(connection_, &message, MSG_NOSIGNAL | MSG_DONTWAIT);
            if (n > 0) {
                done += static_cast<std::size_t>(n);
                continue;
            }
            if (n < 0 && errno == EINTR) {
                continue;
            }
            if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) {
                return false;
            }
            int wait = -1;
            if (!killed_) {
                const auto left =
                    std::chrono::duration_cast<std::chrono::milliseconds>(deadline_ - Clock::now())
                        .count();
                wait = static_cast<int>(std::clamp<long long>(left, 0, 1000));
                if (left <= 0) {
                    kill_tree(guest_.cgroup, child_);
                    killed_at_deadline_ = true;
                    continue;
                }
            }
            pollfd ready{connection_, POLLOUT, 0};
            if (::poll(&ready, 1, wait) > 0 && (ready.revents & (POLLHUP | POLLERR))) {
                return false;
            }
        }
        return true;
    }

    void drain() {
        const auto until = Clock::now() + kDrainWindow;
        while (Clock::now() < until && !(eof_[0] && eof_[1])) {
            pollfd fds[2] = {{eof_[0] ? -1 : streams_[0].fd.get(), POLLIN, 0},
                             {eof_[1] ? -1 : streams_[1].fd.get(), POLLIN, 0}};
            const int ready = ::poll(fds, 2, static_cast<int>(kDrainQuiet.count()));
            if (ready <= 0) {
                break;
            }
            for (int i = 0; i < 2; ++i) {
                if (fds[i].revents) {
                    pump(streams_[i]);
                }
            }
        }
    }

    void finish(ExecReply& reply) {
        reply.stdout_total = streams_[0].total;
        reply.stderr_total = streams_[1].total;
        reply.oom_kills = context_.cgroups->oom_kills() - oom_kills_before_;
    }

    int connection_;
    const ExecContext& context_;
    GuestStack& stack_;
    std::optional<Guest> prepared_;
    bool launched_ = false;
    Guest guest_;
    Stream streams_[2];
    bool eof_[2] = {false, false};
    // Set once the exec's tree was killed (deadline, cap, or a host that stopped reading).
    bool killed_ = false;
    bool killed_at_deadline_ = false;
    Clock::time_point deadline_ = Clock::time_point::max();
    pid_t child_ = -1;
    std::uint64_t cap_ = 0;
    bool stop_at_cap_ = false;
    std::uint64_t oom_kills_before_ = 0;
    std::string pending_stdin_;
    bool tty_ = false;
};

}  // namespace

namespace {

// Step 1: the guest process prepared ahead of the request, in its own child cgroup. Returns once
// the guest is hardened (its cgroup populated), so PID 1's sweep of empty exec cgroups, which
// follows our accept, can never take it; none when preparing failed (the exec is then served on
// demand after accept, which reports the failure).
std::optional<Guest> prepare_spare_guest(const ExecContext& context, GuestStack& stack,
                                         int listener) {
    std::optional<Guest> prepared;
    try {
        prepared = prepare_guest(context, stack, listener);
        if (!prepared->ready) {
            discard(*prepared);
            prepared.reset();
        }
    } catch (const std::exception&) {
        prepared.reset();
    }
    return prepared;
}

// Steps 2 and 4: what PID 1 hears from its spare, on `accepted_fd`.
void tell_pid1(int accepted_fd, char what) {
    const AcceptedNote note{what, ::getpid()};
    [[maybe_unused]] auto told = ::write(accepted_fd, &note, sizeof note);
}

// Step 3: the connection, as the prepared guest hands it over (`launched` when it is already
// starting the request's program), or accepted here when there is no guest or it died before
// taking one (the OOM killer, say). Allocates nothing until the hand-over arrives: a connection
// may already have reached the guest, which then reads its request using our heap
// (exec_guest.hpp).
UniqueFd take_connection(int listener, std::optional<Guest>& prepared, bool& launched) {
    UniqueFd connection;
    launched = false;
    if (prepared && prepared->handoff_fd) {
        char what = 0;
        connection = detail::receive_fd(prepared->handoff_fd.get(), what);
        launched = connection && what == kLaunching;
        prepared->handoff_fd.reset();
        if (!connection) {
            discard(*prepared);
            prepared.reset();
        }
    }
    if (!connection) {
        connection = UniqueFd(accept_connection(listener));
        if (!connection) {
            std::_Exit(1);
        }
    }
    return connection;
}

// Step 4: this handler accepts no more; PID 1, told, forks its successor.
void leave_accepting_to_a_successor(int listener, int accepted_fd) {
    ::close(listener);
    tell_pid1(accepted_fd, AcceptedNote::kAccepted);
    ::close(accepted_fd);
}

}  // namespace

// The exec handler's recipe, in order: a spare guest prepared ahead, PID 1 told it is prepared,
// the connection taken, the listener closed and PID 1 told (it forks our successor), then the
// exec served. The stack the handler's guest processes run on until their execve is declared
// first, so that it outlives every Guest, whose destructor ends a guest still running on it.
void serve_next_exec(int listener, int accepted_fd, const ExecContext& context) {
    ::signal(SIGPIPE, SIG_IGN);
    GuestStack stack;
    std::optional<Guest> prepared = prepare_spare_guest(context, stack, listener);  // 1.
    tell_pid1(accepted_fd, AcceptedNote::kPrepared);                                // 2.
    bool launched = false;
    UniqueFd connection = take_connection(listener, prepared, launched);          // 3.
    leave_accepting_to_a_successor(listener, accepted_fd);                        // 4.
    Exec(connection.get(), context, stack, std::move(prepared), launched).run();  // 5.
}

}  // namespace maf_sandbox::runtime
