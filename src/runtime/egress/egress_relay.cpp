#include "egress_relay.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <cerrno>
#include <ctime>
#include <memory>

#include "maf_sandbox/runtime/kernel/unique_fd.hpp"

namespace maf_sandbox::runtime {
namespace {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using boost::system::error_code;

constexpr std::size_t kPipeSize = 1 << 20;
constexpr std::size_t kCopyBuffer = 64 * 1024;
constexpr unsigned kSpliceFlags = SPLICE_F_MOVE | SPLICE_F_NONBLOCK;

[[noreturn]] void fail(int error, const char* doing) {
    throw boost::system::system_error(error_code(error, boost::system::system_category()), doing);
}

void check(const error_code& ec, const char* doing) {
    if (ec) {
        throw boost::system::system_error(ec, doing);
    }
}

// Copies until `from` ends (returns true) or, when `until_bulk`, until one read fills the whole
// buffer (returns false: a bulk transfer, worth a pipe).
asio::awaitable<bool> relay_by_copy(tcp::socket& from, tcp::socket& to,
                                    const std::function<void()>& progress, bool until_bulk) {
    std::unique_ptr<char[]> storage(new char[kCopyBuffer]);
    while (true) {
        error_code ec;
        const auto into = asio::buffer(storage.get(), kCopyBuffer);
        const auto n =
            co_await from.async_read_some(into, asio::redirect_error(asio::use_awaitable, ec));
        if (ec == asio::error::eof) {
            to.shutdown(tcp::socket::shutdown_send, ec);
            co_return true;
        }
        check(ec, "reading a relayed socket");
        progress();
        const auto out = asio::buffer(storage.get(), n);
        co_await asio::async_write(to, out, asio::redirect_error(asio::use_awaitable, ec));
        check(ec, "writing a relayed socket");
        if (until_bulk && n == kCopyBuffer) {
            co_return false;
        }
    }
}

}  // namespace

asio::awaitable<void> relay_until_eof(tcp::socket& from, tcp::socket& to,
                                      const std::function<void()>& progress) {
    // Small exchanges (most forwarded responses) are cheapest copied: a pipe costs two system
    // calls to make and more to size. The first read that fills the buffer switches to splice.
    if (co_await relay_by_copy(from, to, progress, true)) {
        co_return;
    }
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0) {
        co_await relay_by_copy(from, to, progress, false);
        co_return;
    }
    const UniqueFd pipe_read(fds[0]);
    const UniqueFd pipe_write(fds[1]);
    ::fcntl(pipe_write.get(), F_SETPIPE_SZ, static_cast<int>(kPipeSize));  // best effort
    from.native_non_blocking(true);
    to.native_non_blocking(true);
    const auto executor = co_await asio::this_coro::executor;
    while (true) {
        // Fill: the pipe is empty here, so EAGAIN means `from` has nothing to read yet.
        const auto in = ::splice(from.native_handle(), nullptr, pipe_write.get(), nullptr,
                                 kPipeSize, kSpliceFlags);
        if (in == 0) {
            error_code ignored;
            to.shutdown(tcp::socket::shutdown_send, ignored);
            co_return;
        }
        if (in < 0) {
            if (errno == EINTR) {
                continue;
            }
            if (errno != EAGAIN) {
                fail(errno, "splicing from a relayed socket");
            }
            error_code ec;
            co_await from.async_wait(tcp::socket::wait_read,
                                     asio::redirect_error(asio::use_awaitable, ec));
            check(ec, "waiting for a relayed socket");
            continue;
        }
        progress();
        // Drain everything into `to` before filling again.
        auto pending = static_cast<std::size_t>(in);
        while (pending > 0) {
            const auto out = ::splice(pipe_read.get(), nullptr, to.native_handle(), nullptr,
                                      pending, kSpliceFlags);
            if (out > 0) {
                pending -= static_cast<std::size_t>(out);
                continue;
            }
            if (out < 0 && errno == EINTR) {
                continue;
            }
            if (out < 0 && errno != EAGAIN) {
                fail(errno, "splicing into a relayed socket");
            }
            error_code ec;
            co_await to.async_wait(tcp::socket::wait_write,
                                   asio::redirect_error(asio::use_awaitable, ec));
            check(ec, "waiting for a relayed socket");
        }
        // Let the other sessions run: a fast pair of sockets never needs to wait.
        co_await asio::post(executor, asio::use_awaitable);
    }
}

ScopedSigpipeBlock::ScopedSigpipeBlock() {
    sigset_t pipe_only;
    sigemptyset(&pipe_only);
    sigaddset(&pipe_only, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe_only, &saved_);
}

ScopedSigpipeBlock::~ScopedSigpipeBlock() {
    sigset_t pipe_only;
    sigemptyset(&pipe_only);
    sigaddset(&pipe_only, SIGPIPE);
    const timespec now{0, 0};
    while (sigtimedwait(&pipe_only, nullptr, &now) == SIGPIPE) {
    }
    pthread_sigmask(SIG_SETMASK, &saved_, nullptr);
}

}  // namespace maf_sandbox::runtime
