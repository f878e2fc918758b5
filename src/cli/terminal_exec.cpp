#include "terminal_exec.hpp"

#include <signal.h>
#include <sys/ioctl.h>
#include <sys/signalfd.h>
#include <termios.h>
#include <unistd.h>

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

// SIGWINCH, SIGINT, SIGTERM and SIGHUP taken off their handlers and read from a signalfd for as
// long as this lives; the signal mask is restored after (one still pending is then delivered to
// its handler as usual).
class SignalReader {
  public:
    SignalReader() {
        sigset_t set;
        sigemptyset(&set);
        for (const int signal : {SIGWINCH, SIGINT, SIGTERM, SIGHUP}) {
            sigaddset(&set, signal);
        }
        if (::sigprocmask(SIG_BLOCK, &set, &saved_) != 0) {
            throw SystemError(errno, "blocking the terminal's signals");
        }
        fd_ = ::signalfd(-1, &set, SFD_CLOEXEC);
        if (fd_ < 0) {
            const int error = errno;
            ::sigprocmask(SIG_SETMASK, &saved_, nullptr);
            throw SystemError(error, "reading the terminal's signals");
        }
    }
    ~SignalReader() {
        ::close(fd_);
        ::sigprocmask(SIG_SETMASK, &saved_, nullptr);
    }
    SignalReader(const SignalReader&) = delete;
    SignalReader& operator=(const SignalReader&) = delete;
    int fd() const noexcept { return fd_; }

  private:
    sigset_t saved_{};
    int fd_ = -1;
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
        const SignalReader signals;
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
