// HostShellSandbox::exec: one /bin/sh child in its own session, its pipes and exit read
// asynchronously (pidfd), a deadline timer, and a kill of the whole process group on timeout,
// overflow or cancellation.
#include <fcntl.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>
#include <array>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <variant>

#include "host_shell_sandbox.hpp"
#include "maf_sandbox/core/errors.hpp"
#include "maf_sandbox/core/shell_quote.hpp"

namespace maf_sandbox::testing {

namespace asio = boost::asio;
using namespace boost::asio::experimental::awaitable_operators;

namespace {

// Without a per-call cap the host still bounds what it buffers.
constexpr std::uint64_t kDefaultOutputCap = 64 * kMiB;
constexpr const char* kPath = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

class Fd {
  public:
    explicit Fd(int fd = -1) : fd_(fd) {}
    ~Fd() { reset(); }
    Fd(Fd&& other) noexcept : fd_(other.release()) {}
    Fd& operator=(Fd&& other) noexcept {
        if (this != &other) {
            reset();
            fd_ = other.release();
        }
        return *this;
    }
    int get() const { return fd_; }
    int release() { return std::exchange(fd_, -1); }
    void reset() {
        if (fd_ >= 0) {
            ::close(fd_);
            fd_ = -1;
        }
    }

  private:
    int fd_;
};

struct Pipe {
    Fd read;
    Fd write;
};

Pipe make_pipe() {
    std::array<int, 2> fds{};
    if (::pipe2(fds.data(), O_CLOEXEC) != 0) {
        throw SystemError(errno, "creating a pipe for a host shell command");
    }
    return Pipe{Fd(fds[0]), Fd(fds[1])};
}

// Owns the child: unless it was reaped, its whole process group is killed and reaped on the way
// out, so no error path or cancellation leaves a process behind.
class Child {
  public:
    explicit Child(pid_t pid) : pid_(pid) {}
    ~Child() {
        if (!reaped_) {
            kill_group();
            int status = 0;
            ::waitpid(pid_, &status, 0);
        }
    }
    Child(const Child&) = delete;
    Child& operator=(const Child&) = delete;

    pid_t pid() const { return pid_; }
    void kill_group() const { ::kill(-pid_, SIGKILL); }
    int reap() {
        int status = 0;
        while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
        }
        reaped_ = true;
        if (WIFSIGNALED(status)) {
            return 128 + WTERMSIG(status);
        }
        return WEXITSTATUS(status);
    }

  private:
    pid_t pid_;
    bool reaped_ = false;
};

// A child that exits before reading its stdin must not kill the test process with SIGPIPE.
void ignore_sigpipe_once() {
    static std::once_flag once;
    std::call_once(once, [] { ::signal(SIGPIPE, SIG_IGN); });
}

// Reads one stream to its end. Over the cap it kills the process group and stops reading: an
// exception here would not cancel the sibling operations promptly, a dead group does.
Task<void> drain(asio::posix::stream_descriptor& stream, std::string& head, std::uint64_t& total,
                 std::uint64_t cap, bool& overflowed, const Child& child) {
    std::array<char, 65536> buffer{};
    for (;;) {
        auto [error, count] = co_await stream.async_read_some(asio::buffer(buffer),
                                                              asio::as_tuple(asio::use_awaitable));
        if (error == asio::error::eof) {
            co_return;
        }
        if (error) {
            throw boost::system::system_error(error);
        }
        total += count;
        const auto room = cap > head.size() ? cap - head.size() : 0;
        head.append(buffer.data(), std::min<std::uint64_t>(count, room));
        if (total > cap) {
            overflowed = true;
            child.kill_group();
            stream.close();
            co_return;
        }
    }
}

Task<void> feed(asio::posix::stream_descriptor& stream, std::string bytes) {
    if (!bytes.empty()) {
        // A child that never reads its stdin is not an error: the write just stops.
        co_await asio::async_write(stream, asio::buffer(bytes),
                                   asio::as_tuple(asio::use_awaitable));
    }
    stream.close();
}

Task<int> wait_exit(asio::posix::stream_descriptor& pidfd, Child& child) {
    auto [error] = co_await pidfd.async_wait(asio::posix::descriptor_base::wait_read,
                                             asio::as_tuple(asio::use_awaitable));
    if (error) {
        throw boost::system::system_error(error);
    }
    co_return child.reap();
}

}  // namespace

Task<ExecResult> HostShellSandbox::exec(ExecRequest request) {
    ignore_sigpipe_once();
    auto executor = co_await asio::this_coro::executor;
    const auto directory = working_directory_of(request.working_directory);
    const auto line = std::holds_alternative<Argv>(request.command)
                          ? shell_join(std::get<Argv>(request.command))
                          : std::get<std::string>(request.command);
    const auto cap = request.max_output_bytes.value_or(kDefaultOutputCap);

    // Everything the child needs is built before fork: after it only async-signal-safe calls run.
    std::vector<std::string> environment{kPath, "HOME=" + directory, "LC_ALL=C.UTF-8"};
    for (const auto& [name, value] : request.environment) {
        environment.push_back(name + "=" + value);
    }
    std::vector<char*> envp;
    for (auto& entry : environment) {
        envp.push_back(entry.data());
    }
    envp.push_back(nullptr);
    std::string shell = "/bin/sh";
    std::string dash_c = "-c";
    std::string line_copy = line;
    std::array<char*, 4> argv{shell.data(), dash_c.data(), line_copy.data(), nullptr};
    const auto no_directory =
        fmt::format("sh: cd: can't cd to {}: No such file or directory\n", directory);

    auto in = make_pipe();
    auto out = make_pipe();
    auto err = make_pipe();
    const pid_t pid = ::fork();
    if (pid < 0) {
        throw SystemError(errno, "starting /bin/sh for a host shell command");
    }
    if (pid == 0) {
        ::setsid();
        // The test process ignores SIGPIPE; the command must not inherit that.
        ::signal(SIGPIPE, SIG_DFL);
        ::dup2(in.read.get(), 0);
        ::dup2(out.write.get(), 1);
        ::dup2(err.write.get(), 2);
        if (::chdir(directory.c_str()) != 0) {
            [[maybe_unused]] auto written = ::write(2, no_directory.data(), no_directory.size());
            ::_exit(2);
        }
        ::execve(shell.c_str(), argv.data(), envp.data());
        ::_exit(127);
    }
    Child child(pid);
    in.read.reset();
    out.write.reset();
    err.write.reset();

    Fd pidfd(static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)));
    if (pidfd.get() < 0) {
        throw SystemError(errno, "opening a pidfd for a host shell command",
                          "run the tests on Linux 5.3 or later");
    }
    asio::posix::stream_descriptor stdin_stream(executor, in.write.release());
    asio::posix::stream_descriptor stdout_stream(executor, out.read.release());
    asio::posix::stream_descriptor stderr_stream(executor, err.read.release());
    asio::posix::stream_descriptor exit_stream(executor, pidfd.release());
    asio::steady_timer deadline(executor, std::chrono::duration_cast<asio::steady_timer::duration>(
                                              std::max(request.timeout, Seconds{0})));

    ExecResult result;
    std::uint64_t stdout_total = 0;
    std::uint64_t stderr_total = 0;
    bool overflowed = false;
    {
        auto outcome = co_await (
            (drain(stdout_stream, result.stdout_bytes, stdout_total, cap, overflowed, child) &&
             drain(stderr_stream, result.stderr_bytes, stderr_total, cap, overflowed, child) &&
             feed(stdin_stream, std::move(request.stdin_bytes)) && wait_exit(exit_stream, child)) ||
            deadline.async_wait(asio::use_awaitable));
        if (outcome.index() == 1) {
            child.kill_group();
            // With what the drains had read by the deadline, as the real backends keep it.
            throw SandboxExecTimeout(
                fmt::format("the command did not finish within {:.3g} s and was killed "
                            "with its process group; raise the timeout or make it "
                            "faster",
                            request.timeout.count()),
                std::move(result.stdout_bytes), std::move(result.stderr_bytes));
        }
        result.exit_code = std::get<0>(outcome);
    }
    if (overflowed) {
        throw ExecOutputLimitExceeded(
            fmt::format("the command wrote more than {} bytes on one stream and was killed; "
                        "write less, or redirect the output to a file",
                        cap),
            result.stdout_bytes, result.stderr_bytes, stdout_total + stderr_total);
    }
    co_return result;
}

Task<ExecResult> HostShellSandbox::run_code(std::string, Seconds) {
    throw NotImplemented(
        "the host shell test sandbox does not run code; use exec with an interpreter");
    co_return ExecResult{};
}

}  // namespace maf_sandbox::testing
