#include "maf_sandbox/mcp/stdio_transport.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/json/object.hpp>
#include <boost/json/serialize.hpp>
#include <cerrno>
#include <csignal>
#include <string>
#include <string_view>
#include <vector>

#include "maf_sandbox/core/errors.hpp"

namespace maf_sandbox::mcp {
namespace {

namespace asio = boost::asio;
namespace json = boost::json;
using namespace boost::asio::experimental::awaitable_operators;

// One message per line. Writes are whole and in order: everything runs on one executor.
void write_line(int fd, std::string message) {
    message.push_back('\n');
    std::size_t written = 0;
    while (written < message.size()) {
        const auto n = ::write(fd, message.data() + written, message.size() - written);
        if (n < 0) {
            if (errno == EINTR) {
                continue;
            }
            return;  // the client went away; the end of input will follow
        }
        written += static_cast<std::size_t>(n);
    }
}

Task<void> answer(std::shared_ptr<McpSession> session, std::string line, int output_fd) {
    auto reply = co_await session->handle(std::move(line));
    if (reply) {
        write_line(output_fd, std::move(*reply));
    }
}

void dispatch(const std::shared_ptr<McpSession>& session, std::string line, int output_fd,
              const asio::any_io_executor& executor) {
    if (!line.empty() && line.back() == '\r') {
        line.pop_back();
    }
    if (line.find_first_not_of(" \t") == std::string::npos) {
        return;
    }
    asio::co_spawn(executor, answer(session, std::move(line), output_fd), asio::detached);
}

// Splits input into lines of at most `max` bytes. A longer line is answered once with a parse
// error and its bytes are dropped as they arrive, up to and including its newline.
class LineSplitter {
  public:
    LineSplitter(std::shared_ptr<McpSession> session, int output_fd, std::size_t max,
                 asio::any_io_executor executor)
        : session_(std::move(session)),
          output_fd_(output_fd),
          max_(max),
          executor_(std::move(executor)) {}

    void feed(std::string_view bytes) {
        while (!bytes.empty()) {
            const auto newline = bytes.find('\n');
            const auto part = bytes.substr(0, newline);
            if (!discarding_) {
                if (pending_.size() + part.size() > max_) {
                    refuse();
                } else {
                    pending_.append(part);
                }
            }
            if (newline == std::string_view::npos) {
                return;
            }
            if (!discarding_) {
                dispatch(session_, std::move(pending_), output_fd_, executor_);
            }
            pending_.clear();
            discarding_ = false;
            bytes.remove_prefix(newline + 1);
        }
    }

    // End of input: a last line without a newline is still a message.
    void finish() {
        if (!discarding_) {
            dispatch(session_, std::move(pending_), output_fd_, executor_);
        }
        pending_.clear();
    }

  private:
    void refuse() {
        discarding_ = true;
        pending_.clear();
        pending_.shrink_to_fit();
        const json::object error{
            {"code", -32700},
            {"message", fmt::format("Parse error: a message over {} bytes was dropped; send "
                                    "smaller messages (one JSON-RPC message per line)",
                                    max_)}};
        write_line(output_fd_, json::serialize(json::object{
                                   {"jsonrpc", "2.0"}, {"id", nullptr}, {"error", error}}));
    }

    std::shared_ptr<McpSession> session_;
    int output_fd_;
    std::size_t max_;
    asio::any_io_executor executor_;
    std::string pending_;
    bool discarding_ = false;
};

Task<void> read_messages(asio::posix::stream_descriptor& input, std::shared_ptr<McpSession> session,
                         int output_fd, std::size_t max_message_bytes) {
    auto executor = co_await asio::this_coro::executor;
    LineSplitter lines(std::move(session), output_fd, max_message_bytes, executor);
    std::vector<char> chunk(65536);
    for (;;) {
        auto [error, size] = co_await input.async_read_some(asio::buffer(chunk),
                                                            asio::as_tuple(asio::use_awaitable));
        lines.feed(std::string_view(chunk.data(), size));
        if (error) {
            lines.finish();
            co_return;
        }
    }
}

// A regular file as input cannot be watched by epoll; it is read with blocking reads instead.
Task<void> read_file_messages(int input_fd, std::shared_ptr<McpSession> session, int output_fd,
                              std::size_t max_message_bytes) {
    auto executor = co_await asio::this_coro::executor;
    LineSplitter lines(std::move(session), output_fd, max_message_bytes, executor);
    char chunk[65536];
    for (;;) {
        const auto n = ::read(input_fd, chunk, sizeof chunk);
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n <= 0) {
            break;
        }
        lines.feed(std::string_view(chunk, static_cast<std::size_t>(n)));
    }
    lines.finish();
    co_return;
}

}  // namespace

Task<void> serve_stdio(McpServer& server, StdioOptions options) {
    // A client that closes its end must not kill the server before it disposes.
    ::signal(SIGPIPE, SIG_IGN);
    auto executor = co_await asio::this_coro::executor;
    auto session = server.open_session();
    const int output_fd = options.output_fd;
    session->set_message_sink(
        [output_fd](std::string message) { write_line(output_fd, std::move(message)); });

    asio::signal_set signals(executor);
    if (options.handle_signals) {
        signals.add(SIGTERM);
        signals.add(SIGINT);
    }
    const int input_fd = ::dup(options.input_fd);
    if (input_fd < 0) {
        throw SystemError(errno, "duplicating the MCP server's standard input");
    }
    asio::posix::stream_descriptor input(executor);
    boost::system::error_code assign_error;
    input.assign(input_fd, assign_error);

    auto stop = signals.async_wait(asio::as_tuple(asio::use_awaitable));
    if (!assign_error) {
        auto reader = read_messages(input, session, output_fd, options.max_message_bytes);
        co_await (std::move(reader) || std::move(stop));
    } else {
        auto reader = read_file_messages(input_fd, session, output_fd, options.max_message_bytes);
        co_await std::move(reader);
        ::close(input_fd);
        // Let the requests read from the file finish before the session ends.
        asio::steady_timer settle(executor, std::chrono::milliseconds(50));
        co_await settle.async_wait(asio::as_tuple(asio::use_awaitable));
    }
    co_await session->close();
    boost::system::error_code ignored;
    signals.cancel(ignored);
    input.close(ignored);
}

}  // namespace maf_sandbox::mcp
