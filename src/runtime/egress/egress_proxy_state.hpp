// The egress proxy's process-wide state, shared by its accept loop (egress_proxy.cpp) and its
// sessions (egress_session.cpp). Private to the egress room.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdio>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>

#include "egress_decision_log.hpp"
#include "egress_hosts_file.hpp"
#include "maf_sandbox/runtime/egress/egress.hpp"

namespace maf_sandbox::runtime::proxy {

namespace asio = boost::asio;
using boost::system::error_code;

struct ProxyState {
    const EgressProxyOptions& options;
    EgressHostsFile hosts;
    EgressDecisionLog log;
    // Reports records the log's rate bound held back once their second is over (armed on demand,
    // so an idle proxy never wakes).
    asio::steady_timer flush_timer;
    bool flush_armed = false;
    std::size_t active = 0;

    void log_decision(const EgressDecision& decision) {
        log.append(decision);  // throws: a decision that cannot be logged is not made
        if (log.pending_suppressed() == 0 || flush_armed) {
            return;
        }
        flush_armed = true;
        flush_timer.expires_after(std::chrono::milliseconds(1100));
        flush_timer.async_wait([this](const error_code& ec) {
            flush_armed = false;
            if (ec) {
                return;
            }
            try {
                log.flush_suppressed();
            } catch (const std::exception& e) {
                std::fprintf(stderr, "maf-sandbox egress proxy: %s\n", e.what());
            }
        });
    }
};

// Serves one accepted guest connection on the guest socket's executor until it is done.
void start_session(ProxyState& proxy, asio::ip::tcp::socket guest);

}  // namespace maf_sandbox::runtime::proxy
