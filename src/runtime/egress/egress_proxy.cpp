// The egress proxy process: the listener the supervisor hands it, the accept loop with its session
// bound, and the lifetime pipe that ends it with the sandbox. Each connection is a session
// (egress_session.cpp).
#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <cstdio>

#include "egress_proxy_state.hpp"
#include "egress_relay.hpp"
#include "maf_sandbox/runtime/egress/egress.hpp"
#include "maf_sandbox/runtime/kernel/unique_fd.hpp"

namespace maf_sandbox::runtime {
namespace proxy {
namespace {

using tcp = asio::ip::tcp;

EgressDecisionLog open_decision_log(const EgressProxyOptions& options, UniqueFd& given) {
    const auto& limits = options.operator_options.decision_log;
    if (given) {
        return EgressDecisionLog(std::move(given), options.decision_log, limits);
    }
    return EgressDecisionLog(options.decision_log, limits);
}

bool transient_accept_error(const error_code& ec) {
    return ec == asio::error::connection_aborted || ec == asio::error::no_descriptors ||
           ec == asio::error::no_buffer_space || ec == asio::error::no_memory ||
           ec.value() == ENFILE || ec.value() == EPROTO || ec.value() == EPERM;
}

asio::awaitable<void> accept_loop(tcp::acceptor& acceptor, ProxyState& proxy) {
    const auto executor = co_await asio::this_coro::executor;
    asio::steady_timer backoff(executor);
    while (true) {
        error_code ec;
        tcp::socket guest(executor);
        co_await acceptor.async_accept(guest, asio::redirect_error(asio::use_awaitable, ec));
        if (ec == asio::error::operation_aborted) {
            co_return;
        }
        if (ec) {
            if (!transient_accept_error(ec)) {
                throw boost::system::system_error(ec, "accepting a guest connection");
            }
            backoff.expires_after(std::chrono::milliseconds(50));
            co_await backoff.async_wait(asio::redirect_error(asio::use_awaitable, ec));
            continue;
        }
        if (proxy.active >= proxy.options.max_sessions) {
            guest.close(ec);  // over the limit: refused, never queued without bound
            continue;
        }
        start_session(proxy, std::move(guest));
    }
}

}  // namespace

}  // namespace proxy

std::size_t egress_sessions_within(std::uint64_t nofile) {
    constexpr std::uint64_t kOwnDescriptors = 32;
    constexpr std::uint64_t kPerSession = 8;
    return static_cast<std::size_t>(std::max<std::uint64_t>(
        nofile > kOwnDescriptors ? (nofile - kOwnDescriptors) / kPerSession : 0, 1));
}

int run_egress_proxy(int listener, int lifetime_fd, const EgressProxyOptions& options) {
    using namespace proxy;
    UniqueFd listening(listener);
    UniqueFd log_descriptor(options.decision_log_fd);
    const ScopedSigpipeBlock sigpipe;  // splice reports a closed peer as SIGPIPE otherwise
    try {
        asio::io_context io(1);
        ProxyState proxy{options,
                         options.operator_options.hosts_file
                             ? EgressHostsFile::load(*options.operator_options.hosts_file)
                             : EgressHostsFile{},
                         open_decision_log(options, log_descriptor), asio::steady_timer(io)};

        sockaddr_storage address{};
        socklen_t length = sizeof address;
        if (::getsockname(listening.get(), reinterpret_cast<sockaddr*>(&address), &length) != 0) {
            throw boost::system::system_error(error_code(errno, boost::system::system_category()),
                                              "reading the egress listener's address");
        }
        const auto protocol = address.ss_family == AF_INET6 ? tcp::v6() : tcp::v4();
        tcp::acceptor acceptor(io);
        acceptor.assign(protocol, listening.get());
        listening.release();

        UniqueFd lifetime_copy(::fcntl(lifetime_fd, F_DUPFD_CLOEXEC, 0));
        if (!lifetime_copy) {
            throw boost::system::system_error(error_code(errno, boost::system::system_category()),
                                              "duplicating the egress proxy's lifetime descriptor");
        }
        asio::posix::stream_descriptor lifetime(io, lifetime_copy.release());
        int status = 0;
        lifetime.async_wait(asio::posix::stream_descriptor::wait_read, [&](const error_code& ec) {
            if (ec != asio::error::operation_aborted) {
                io.stop();
            }
        });
        auto loop = accept_loop(acceptor, proxy);
        asio::co_spawn(io, std::move(loop), [&](std::exception_ptr failure) {
            if (failure) {
                status = 1;
                try {
                    std::rethrow_exception(failure);
                } catch (const std::exception& e) {
                    std::fprintf(stderr, "maf-sandbox egress proxy stopped: %s\n", e.what());
                } catch (...) {
                    std::fprintf(stderr, "maf-sandbox egress proxy stopped\n");
                }
            }
            io.stop();
        });
        io.run();
        try {
            proxy.log.flush_suppressed();
        } catch (const std::exception& e) {
            std::fprintf(stderr, "maf-sandbox egress proxy: %s\n", e.what());
        }
        return status;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "maf-sandbox egress proxy cannot run: %s\n", e.what());
        return 1;
    } catch (...) {
        return 1;
    }
}

}  // namespace maf_sandbox::runtime
