// A streamed exec on the terminal: each chunk goes to this process's stdout or stderr as it
// arrives, and the outcome is reported once the exec ends, as exec_report.hpp reports a bounded
// one (the same exit statuses, the same wording), without printing the heads a second time.
// Both front ends use it: the full CLI through Sandbox::exec_stream, the lean one through the
// wire's output callback.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "maf_sandbox/core/errors.hpp"
#include "maf_sandbox/core/types.hpp"

namespace maf_sandbox::cli {

class StreamPrinter {
  public:
    // Writes the bytes whole to fd 1 or 2 before returning (the caller's next chunk waits for
    // it), remembering the stream's first failure; after one, that stream's bytes are dropped.
    void write(ExecStreamName stream, std::string_view bytes);

    // The program's status, or kExitFailed when a stream could not be written in full
    // (said on stderr, as report_exec says it). What the result holds past the bytes streamed
    // (a note the backend added, such as the OOM killer's) is printed first.
    int finished(const ExecResult& result);
    // Past the cap: the heads are already out; the marker follows, as report_output_limit's.
    int finished(const ExecOutputLimitExceeded& error, std::uint64_t cap);

    // True once any byte of either stream was handed to write.
    bool printed() const { return out_bytes_ + err_bytes_ > 0; }

  private:
    int delivered(int status) const;

    std::uint64_t out_bytes_ = 0;
    std::uint64_t err_bytes_ = 0;
    int out_error_ = 0;
    int err_error_ = 0;
};

// The stdin to forward: every byte of fd 0 when it is not a terminal (a pipe, a file), nothing
// when it is one (an interactive run is not read ahead) or closed. Throws InvalidArgument past
// `max_bytes`.
std::string forwarded_stdin(std::uint64_t max_bytes);

}  // namespace maf_sandbox::cli
