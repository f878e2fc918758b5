#include "exec_stream_report.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>

#include <fmt/format.h>

#include "exec_report.hpp"
#include "exit_status.hpp"

namespace maf_sandbox::cli {

namespace {

// 0, or the errno of a write that did not reach the file whole (a full disk, a closed pipe).
int write_fd(int fd, std::string_view bytes) {
    while (!bytes.empty()) {
        const ssize_t n = ::write(fd, bytes.data(), bytes.size());
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n <= 0) {
            return n < 0 ? errno : EIO;
        }
        bytes.remove_prefix(static_cast<std::size_t>(n));
    }
    return 0;
}

}  // namespace

void StreamPrinter::write(ExecStreamName stream, std::string_view bytes) {
    const bool out = stream == ExecStreamName::stdout_stream;
    int& error = out ? out_error_ : err_error_;
    (out ? out_bytes_ : err_bytes_) += bytes.size();
    if (error == 0) {
        if (out) {
            // Anything this process printed on stdout itself comes first.
            std::fflush(stdout);
        }
        error = write_fd(out ? STDOUT_FILENO : STDERR_FILENO, bytes);
    }
}

int StreamPrinter::finished(const ExecResult& result) {
    if (result.stdout_bytes.size() > out_bytes_) {
        write(ExecStreamName::stdout_stream,
              std::string_view(result.stdout_bytes).substr(out_bytes_));
    }
    if (result.stderr_bytes.size() > err_bytes_) {
        write(ExecStreamName::stderr_stream,
              std::string_view(result.stderr_bytes).substr(err_bytes_));
    }
    return delivered(result.exit_code);
}

int StreamPrinter::delivered(int status) const {
    return report_delivery(out_error_, err_error_, status);
}

int StreamPrinter::finished(const ExecOutputLimitExceeded& error, std::uint64_t cap) {
    const auto dropped =
        error.total_bytes() - error.stdout_head().size() - error.stderr_head().size();
    const int marker_error =
        write_fd(STDERR_FILENO,
                 fmt::format("\n[maf-sandbox: output over the {}-byte cap; {} bytes dropped]\n",
                             cap, dropped));
    if (err_error_ == 0) {
        err_error_ = marker_error;
    }
    // Killed for the overflow, the program has no status of its own: the cap stopped it.
    return delivered(error.exit_code() >= 0 ? error.exit_code() : kExitFailed);
}

std::string forwarded_stdin(std::uint64_t max_bytes) {
    if (::isatty(STDIN_FILENO) == 1 || ::fcntl(STDIN_FILENO, F_GETFD) < 0) {
        return {};
    }
    std::string bytes;
    char buffer[64 * 1024];
    for (;;) {
        const ssize_t n = ::read(STDIN_FILENO, buffer, sizeof buffer);
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n <= 0) {
            // A read error (stdin a directory, say) forwards what came before it, as EOF would.
            return bytes;
        }
        if (bytes.size() + static_cast<std::size_t>(n) > max_bytes) {
            throw InvalidArgument(fmt::format(
                "stdin is over the {}-byte limit of what an exec forwards; pass large input as a "
                "file (run --in)",
                max_bytes));
        }
        bytes.append(buffer, static_cast<std::size_t>(n));
    }
}

}  // namespace maf_sandbox::cli
