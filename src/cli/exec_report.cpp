#include "exec_report.hpp"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string_view>

#include <fmt/format.h>

#include "exit_status.hpp"

namespace maf_sandbox::cli {

namespace {

// 0, or the errno of a write that did not reach the stream's file (a full disk, a closed pipe).
int write_all(std::FILE* stream, std::string_view bytes) {
    errno = 0;
    const auto written = std::fwrite(bytes.data(), 1, bytes.size(), stream);
    if (std::fflush(stream) == 0 && written == bytes.size()) {
        return 0;
    }
    return errno != 0 ? errno : EIO;
}

}  // namespace

// The program's streams go where the caller pointed them; if either cannot be written there, the
// caller would read a cut result as a whole one, so the command fails instead (125), saying so on
// stderr when that is the stream still working.
int report_delivery(int out_error, int err_error, int status) {
    if (out_error == 0 && err_error == 0) {
        return status;
    }
    std::fprintf(stderr,
                 "error: the program's %s could not be written in full (%s); the command's result "
                 "is lost, so maf-sandbox exits %d instead of the program's status %d\n",
                 out_error != 0 ? "stdout" : "stderr",
                 std::strerror(out_error != 0 ? out_error : err_error), kExitFailed, status);
    // Reported here: the full CLI's final check of stdout must not report it again.
    std::clearerr(stdout);
    return kExitFailed;
}

int report_exec(const ExecResult& result) {
    const int out_error = write_all(stdout, result.stdout_bytes);
    const int err_error = write_all(stderr, result.stderr_bytes);
    return report_delivery(out_error, err_error, result.exit_code);
}

void report_replacement(const Sandbox& sandbox) {
    if (const auto& replaced = sandbox.replaced()) {
        write_all(stderr, fmt::format("[maf-sandbox: sandbox replaced, state lost: {}]\n",
                                      replaced->reason));
    }
}

int report_output_limit(const ExecOutputLimitExceeded& error, std::uint64_t cap) {
    const int out_error = write_all(stdout, error.stdout_head());
    int err_error = write_all(stderr, error.stderr_head());
    const auto dropped =
        error.total_bytes() - error.stdout_head().size() - error.stderr_head().size();
    const int marker_error = write_all(
        stderr, fmt::format("\n[maf-sandbox: output over the {}-byte cap; {} bytes dropped]\n", cap,
                            dropped));
    err_error = err_error != 0 ? err_error : marker_error;
    // Killed for the overflow, the program has no status of its own: the cap stopped it.
    return report_delivery(out_error, err_error,
                           error.exit_code() >= 0 ? error.exit_code() : kExitFailed);
}

}  // namespace maf_sandbox::cli
