// The interactive exec's host loop: one poll over the connection, the input and the signals.
// What goes to the supervisor waits in a small outbox sent without blocking, so a supervisor busy
// sending output (and not reading) never deadlocks against this side sending input.
#include "maf_sandbox/runtime/wire/exec_interactive.hpp"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <string>

#include <boost/json/serialize.hpp>
#include <tuple>

#include "maf_sandbox/runtime/kernel/unique_fd.hpp"

namespace maf_sandbox::runtime {

namespace {

// Input is read only while the outbox holds less than this, so a stalled supervisor holds the
// input back instead of growing the outbox.
constexpr std::size_t kOutboxLimit = exec_wire::kMaxStdinChunk;

class Outbox {
  public:
    void frame(char type, std::string_view payload) {
        exec_wire::append_frame(bytes_, type, payload);
    }
    bool empty() const noexcept { return bytes_.empty(); }
    bool has_room() const noexcept { return bytes_.size() < kOutboxLimit; }
    // Sends what the socket takes now; false when the peer is gone.
    bool flush(int fd) {
        while (!bytes_.empty()) {
            const ssize_t n = ::send(fd, bytes_.data(), bytes_.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
            if (n < 0 && errno == EINTR) {
                continue;
            }
            if (n < 0) {
                return errno == EAGAIN || errno == EWOULDBLOCK;
            }
            bytes_.erase(0, static_cast<std::size_t>(n));
        }
        return true;
    }

  private:
    std::string bytes_;
};

// The next signal number written to `fd` (one byte each), or 0 when none was read.
int read_signal(int fd) {
    unsigned char number = 0;
    ssize_t n = 0;
    do {
        n = ::read(fd, &number, 1);
    } while (n < 0 && errno == EINTR);
    return n == 1 ? number : 0;
}

}  // namespace

InteractiveOutcome call_exec_interactive(const std::filesystem::path& socket, ExecCall call,
                                         const InteractiveIo& io,
                                         const ExecOutputCallback& on_output,
                                         std::chrono::milliseconds grace) {
    call.interactive = true;
    if (call.tty && io.window_size) {
        std::tie(call.rows, call.cols) = io.window_size();
    }
    validate_exec_call(call);
    UniqueFd fd(connect_supervisor(socket));
    if (!exec_wire::write_frame(fd.get(), exec_wire::kRequest,
                                boost::json::serialize(exec_wire::to_json(call))) ||
        !exec_wire::write_frame(fd.get(), exec_wire::kStdin, call.stdin_bytes)) {
        throw_exec_link_failure(socket, ExecLinkFailure::hung_up_on_request);
    }
    const auto deadline = std::chrono::steady_clock::now() + call.timeout + grace;
    ExecReplyCollector collector(socket, call.max_output_bytes);
    Outbox outbox;
    bool input_open = io.input >= 0;
    std::string payload;
    std::string chunk(exec_wire::kMaxStdinChunk, '\0');
    for (;;) {
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
            deadline - std::chrono::steady_clock::now());
        if (left.count() <= 0) {
            throw_exec_link_failure(socket, ExecLinkFailure::no_answer);
        }
        pollfd fds[3];
        int count = 0;
        fds[count++] = {fd.get(), static_cast<short>(POLLIN | (outbox.empty() ? 0 : POLLOUT)), 0};
        const int input_index = input_open && outbox.has_room() ? count : -1;
        if (input_index >= 0) {
            fds[count++] = {io.input, POLLIN, 0};
        }
        const int signal_index = io.signals >= 0 ? count : -1;
        if (signal_index >= 0) {
            fds[count++] = {io.signals, POLLIN, 0};
        }
        if (::poll(fds, static_cast<nfds_t>(count), static_cast<int>(left.count())) < 0) {
            if (errno == EINTR) {
                continue;
            }
            throw_exec_link_failure(socket, ExecLinkFailure::hung_up, std::strerror(errno));
        }
        if (signal_index >= 0 && (fds[signal_index].revents & POLLIN)) {
            const int signal = read_signal(io.signals);
            if (signal == SIGWINCH) {
                if (call.tty && io.window_size) {
                    const auto [rows, cols] = io.window_size();
                    outbox.frame(exec_wire::kResize, exec_wire::resize_payload(rows, cols));
                }
            } else if (signal != 0) {
                InteractiveOutcome ended;
                ended.ended_by = signal;
                return ended;  // closing the connection kills the exec's tree
            }
        }
        if (input_index >= 0 && (fds[input_index].revents & (POLLIN | POLLHUP | POLLERR))) {
            const ssize_t n = ::read(io.input, chunk.data(), chunk.size());
            if (n > 0) {
                outbox.frame(exec_wire::kStdinMore,
                             std::string_view(chunk.data(), static_cast<std::size_t>(n)));
            } else if (n == 0 || (errno != EINTR && errno != EAGAIN)) {
                outbox.frame(exec_wire::kStdinMore, {});
                input_open = false;
            }
        }
        if (!outbox.flush(fd.get())) {
            throw_exec_link_failure(socket, ExecLinkFailure::hung_up);
        }
        if (fds[0].revents & (POLLIN | POLLHUP | POLLERR)) {
            char type = 0;
            if (!exec_wire::read_frame(fd.get(), type, payload, exec_wire::kMaxRequestBytes)) {
                throw_exec_link_failure(socket, ExecLinkFailure::hung_up);
            }
            if (collector.take(type, payload)) {
                return InteractiveOutcome{std::move(collector.reply()), 0};
            }
            if (on_output && (type == exec_wire::kStdout || type == exec_wire::kStderr)) {
                on_output(type, payload);
            }
        }
    }
}

}  // namespace maf_sandbox::runtime
