#include "maf_sandbox/local/exec_client.hpp"

#include <algorithm>
#include <array>
#include <cstring>
#include <optional>
#include <string_view>
#include <utility>
#include <vector>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/deferred.hpp>
#include <boost/asio/experimental/parallel_group.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>

namespace maf_sandbox::local {

namespace asio = boost::asio;
namespace wire = runtime::exec_wire;
using boost::system::error_code;
using runtime::ExecLinkFailure;
using Connection = asio::local::stream_protocol::socket;

namespace {

// Large enough that one read usually takes the whole answer of a small exec (result and output).
constexpr std::size_t kReadChunk = 16 * 1024;

// A cancelled operation is the caller's doing, not the supervisor's: it propagates as itself.
void rethrow_if_cancelled(const error_code& error) {
    if (error == asio::error::operation_aborted) {
        throw boost::system::system_error(error);
    }
}

// Whole frames out of a byte stream read in large pieces (fewer reads and wake-ups than reading
// each header and payload exactly). Holds at most one frame plus one read.
class FrameBuffer {
  public:
    struct Frame {
        char type;
        std::string_view payload;  // valid until the next room()
    };

    // The next whole frame, if one is buffered.
    std::optional<Frame> next() {
        if (end_ - begin_ < wire::kFrameHeaderBytes) {
            return std::nullopt;
        }
        const auto size = wire::frame_payload_size(bytes_.data() + begin_);
        if (size > wire::kMaxRequestBytes || end_ - begin_ < wire::kFrameHeaderBytes + size) {
            return std::nullopt;
        }
        const Frame frame{bytes_[begin_],
                          std::string_view(bytes_.data() + begin_ + wire::kFrameHeaderBytes, size)};
        begin_ += wire::kFrameHeaderBytes + size;
        return frame;
    }

    // True when the buffered frame announces more than the wire allows (a confused peer).
    bool oversized() const {
        return end_ - begin_ >= wire::kFrameHeaderBytes &&
               wire::frame_payload_size(bytes_.data() + begin_) > wire::kMaxRequestBytes;
    }

    // Room for the next read: what is left moves to the front, and the buffer grows to hold the
    // frame it begins whole.
    asio::mutable_buffer room() {
        std::memmove(bytes_.data(), bytes_.data() + begin_, end_ - begin_);
        end_ -= begin_;
        begin_ = 0;
        auto need = kReadChunk;
        if (end_ >= wire::kFrameHeaderBytes) {
            need =
                std::max(need, wire::kFrameHeaderBytes + wire::frame_payload_size(bytes_.data()));
        }
        if (bytes_.size() < need) {
            bytes_.resize(need);
        }
        return asio::buffer(bytes_.data() + end_, bytes_.size() - end_);
    }

    void filled(std::size_t bytes) { end_ += bytes; }

  private:
    std::vector<char> bytes_ = std::vector<char>(kReadChunk);
    std::size_t begin_ = 0;
    std::size_t end_ = 0;
};

// The request and stdin in one write (the supervisor reads them as they come), then frames until
// the result.
Task<runtime::ExecReply> converse(Connection& connection, const runtime::ExecCall& call,
                                  const std::filesystem::path& socket, const ExecSink& sink) {
    const auto prefix = wire::request_prefix(call);
    const std::array<asio::const_buffer, 2> request{asio::buffer(prefix),
                                                    asio::buffer(call.stdin_bytes)};
    error_code error;
    co_await asio::async_write(connection, request,
                               asio::redirect_error(asio::use_awaitable, error));
    if (error) {
        rethrow_if_cancelled(error);
        runtime::throw_exec_link_failure(socket, ExecLinkFailure::hung_up_on_request);
    }
    runtime::ExecReplyCollector collector(socket, call.max_output_bytes);
    FrameBuffer frames;
    for (;;) {
        while (const auto frame = frames.next()) {
            if (collector.take(frame->type, frame->payload)) {
                co_return std::move(collector.reply());
            }
            if (sink && (frame->type == wire::kStdout || frame->type == wire::kStderr)) {
                // Awaited before the next read: a slow sink holds the socket, and through it the
                // program's pipes, instead of growing a queue here.
                auto delivered =
                    sink(ExecChunk{frame->type == wire::kStdout ? ExecStreamName::stdout_stream
                                                                : ExecStreamName::stderr_stream,
                                   std::string(frame->payload)});
                co_await std::move(delivered);
            }
        }
        if (frames.oversized()) {
            runtime::throw_exec_link_failure(socket, ExecLinkFailure::hung_up);
        }
        const auto room = frames.room();
        const auto read = co_await connection.async_read_some(
            room, asio::redirect_error(asio::use_awaitable, error));
        if (error) {
            rethrow_if_cancelled(error);
            runtime::throw_exec_link_failure(socket, ExecLinkFailure::hung_up);
        }
        frames.filled(read);
    }
}

}  // namespace

Task<runtime::ExecReply> call_exec_async(const std::filesystem::path& socket,
                                         const runtime::ExecCall& call, const ExecSink& sink,
                                         std::chrono::milliseconds grace) {
    runtime::validate_exec_call(call);
    const auto address = runtime::supervisor_address(socket);
    const asio::local::stream_protocol::endpoint endpoint(address.sun_path);
    const auto executor = co_await asio::this_coro::executor;
    // Owned by this frame: however the exec ends (result, deadline, cancellation, destruction),
    // the connection closes here, and the supervisor kills the tree of an exec still running.
    Connection connection(executor);
    error_code error;
    co_await connection.async_connect(endpoint, asio::redirect_error(asio::use_awaitable, error));
    if (error) {
        rethrow_if_cancelled(error);
        runtime::throw_exec_link_failure(socket, ExecLinkFailure::refused, error.message());
    }
    // The exchange against its deadline: whichever ends first cancels the other. (Not the
    // awaitable operators' `||`, which in Boost 1.81 waits for the first *success*: a hang-up
    // would then surface only at the deadline, as "did not answer".)
    asio::steady_timer deadline(executor, call.timeout + grace);
    auto exchange =
        asio::co_spawn(executor, converse(connection, call, socket, sink), asio::deferred);
    auto expiry = deadline.async_wait(asio::deferred);
    auto race = asio::experimental::make_parallel_group(std::move(exchange), std::move(expiry));
    auto [order, failure, reply, expired] =
        co_await race.async_wait(asio::experimental::wait_for_one(), asio::use_awaitable);
    if (order[0] == 1) {
        if (!expired) {
            runtime::throw_exec_link_failure(socket, ExecLinkFailure::no_answer);
        }
        throw boost::system::system_error(expired);  // the caller cancelled us
    }
    if (failure) {
        std::rethrow_exception(failure);
    }
    co_return std::move(reply);
}

Task<runtime::ExecReply> exec_in_sandbox_async(const runtime::SandboxHandle& handle,
                                               const runtime::ExecCall& call,
                                               const ExecSink& sink) {
    return call_exec_async(handle.socket, call, sink);
}

}  // namespace maf_sandbox::local
