// Moving bytes between the guest's and the upstream's sockets once the proxy has allowed them:
// splice(2) through a pipe, so a bulk download never crosses user space.
#pragma once

#include <signal.h>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <functional>

namespace maf_sandbox::runtime {

// Relays `from` to `to` until `from` ends, then half-closes `to`. `progress` runs after each
// piece moved (the proxy's idle deadline). Throws boost::system::system_error when either socket
// fails or is closed under it. Splices through a pipe; copies through a buffer when no pipe can be
// made. Needs SIGPIPE blocked in the calling thread (splice has no MSG_NOSIGNAL): see
// ScopedSigpipeBlock.
boost::asio::awaitable<void> relay_until_eof(boost::asio::ip::tcp::socket& from,
                                             boost::asio::ip::tcp::socket& to,
                                             const std::function<void()>& progress);

// Blocks SIGPIPE in this thread for its lifetime, then discards one that arrived and restores the
// mask: a write to a closed peer is then an EPIPE error, never the end of the process.
class ScopedSigpipeBlock {
  public:
    ScopedSigpipeBlock();
    ~ScopedSigpipeBlock();
    ScopedSigpipeBlock(const ScopedSigpipeBlock&) = delete;
    ScopedSigpipeBlock& operator=(const ScopedSigpipeBlock&) = delete;

  private:
    sigset_t saved_{};
};

}  // namespace maf_sandbox::runtime
