#include "terminal_exec.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "exec_stream_report.hpp"
#include "interrupt.hpp"
#include "maf_sandbox/core/errors.hpp"
#include "maf_sandbox/local/exec_outcome.hpp"
#include "maf_sandbox/local/terminal_handle.hpp"
#include "maf_sandbox/runtime/wire/exec_interactive.hpp"

namespace maf_sandbox::cli {

namespace {

// The host's terminal in raw mode for as long as this lives: no echo, no line editing, no signal
// keys, so what is typed goes to the guest's terminal byte for byte, and the guest's terminal does
// the echoing and editing. Restored on every way out of the scope.
class RawTerminal {
  public:
    explicit RawTerminal(int fd) : fd_(fd) {
        if (::isatty(fd_) != 1 || ::tcgetattr(fd_, &saved_) != 0) {
            return;
        }
        termios raw = saved_;
        ::cfmakeraw(&raw);
        active_ = ::tcsetattr(fd_, TCSADRAIN, &raw) == 0;
    }
    ~RawTerminal() {
        if (active_) {
            ::tcsetattr(fd_, TCSADRAIN, &saved_);
        }
    }
    RawTerminal(const RawTerminal&) = delete;
    RawTerminal& operator=(const RawTerminal&) = delete;

  private:
    int fd_;
    termios saved_{};
    bool active_ = false;
};

// The write end of SignalPipe's pipe, for its handler.
std::atomic<int> signal_pipe_write{-1};

void note_signal(int signal) {
    const int saved = errno;
    const auto number = static_cast<unsigned char>(signal);
    [[maybe_unused]] auto written = ::write(signal_pipe_write.load(), &number, 1);
    errno = saved;
}

// SIGWINCH, SIGINT, SIGTERM and SIGHUP caught for as long as this lives, each signal's number
// written to a pipe the exec's loop polls; the earlier handlers are put back after. A handler,
// not a signalfd: the CLI has threads of its own that do not block these signals, and a signal is
// delivered to any thread that does not block it.
class SignalPipe {
  public:
    SignalPipe() {
        if (::pipe2(fds_, O_CLOEXEC | O_NONBLOCK) != 0) {
            throw SystemError(errno, "creating the terminal's signal pipe");
        }
        signal_pipe_write.store(fds_[1]);
        struct sigaction action {};
        action.sa_handler = note_signal;
        action.sa_flags = SA_RESTART;
        sigemptyset(&action.sa_mask);
        for (std::size_t i = 0; i < kSignals.size(); ++i) {
            ::sigaction(kSignals[i], &action, &saved_[i]);
        }
    }
    ~SignalPipe() {
        for (std::size_t i = 0; i < kSignals.size(); ++i) {
            ::sigaction(kSignals[i], &saved_[i], nullptr);
        }
        signal_pipe_write.store(-1);
        ::close(fds_[0]);
        ::close(fds_[1]);
    }
    SignalPipe(const SignalPipe&) = delete;
    SignalPipe& operator=(const SignalPipe&) = delete;
    int fd() const noexcept { return fds_[0]; }

  private:
    static constexpr std::array<int, 4> kSignals{SIGWINCH, SIGINT, SIGTERM, SIGHUP};
    int fds_[2] = {-1, -1};
    std::array<struct sigaction, 4> saved_{};
};

std::pair<std::uint16_t, std::uint16_t> window_size() {
    winsize size{};
    if (::ioctl(STDIN_FILENO, TIOCGWINSZ, &size) != 0 || size.ws_row == 0 || size.ws_col == 0) {
        return {24, 80};
    }
    return {size.ws_row, size.ws_col};
}

}  // namespace

void require_terminal(const SandboxBackend& backend, const TerminalOptions& options) {
    if ((options.tty || options.interactive) &&
        !backend.declarations().declares(Capability::terminal)) {
        throw SandboxCapabilityNotSupported(fmt::format(
            "-t and -i need a terminal in the sandbox, which the {} backend does not offer (it "
            "does not declare the terminal capability); drop -t/-i (a pipe on stdin is still "
            "forwarded) or use --backend local",
            backend.name()));
    }
}

int run_on_terminal(const Sandbox& sandbox, ExecRequest request, std::uint64_t max_output,
                    const TerminalOptions& options) {
    const auto* handle = local::terminal_handle_of(sandbox);
    if (handle == nullptr) {
        throw SandboxCapabilityNotSupported(
            "-t and -i run on local sandboxes only; drop them, or use --backend local");
    }
    auto call = local::exec_call_for(std::move(request), sandbox.base_directory(), max_output);
    call.tty = options.tty;
    StreamPrinter printer;
    runtime::InteractiveOutcome outcome;
    {
        const SignalPipe signals;
        const RawTerminal raw(options.tty ? STDIN_FILENO : -1);
        runtime::InteractiveIo io;
        io.input = options.interactive ? STDIN_FILENO : -1;
        io.signals = signals.fd();
        io.window_size = window_size;
        outcome = runtime::call_exec_interactive(
            handle->socket, call, io, [&printer](char type, std::string_view bytes) {
                printer.write(type == runtime::exec_wire::kStdout ? ExecStreamName::stdout_stream
                                                                  : ExecStreamName::stderr_stream,
                              bytes);
            });
    }
    if (outcome.ended_by != 0) {
        throw Interrupted(outcome.ended_by);
    }
    auto& reply = outcome.reply;
    if (call.tty) {
        // A terminal's output was streamed whole: nothing of what its user saw was dropped.
        reply.stdout_total = reply.stdout_head.size();
        reply.stderr_total = reply.stderr_head.size();
    }
    try {
        return printer.finished(local::exec_result_of(reply, call));
    } catch (const ExecOutputLimitExceeded& e) {
        return printer.finished(e, call.max_output_bytes);
    }
}

}  // namespace maf_sandbox::cli
