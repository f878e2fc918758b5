// Shared helpers for the net tests: one io_context per test, a TLS authority minted once.
#pragma once

#include <gtest/gtest.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <chrono>

#include "maf_sandbox/core/run_blocking.hpp"
#include "maf_sandbox/net/http_client.hpp"
#include "maf_sandbox/net/http_server.hpp"
#include "maf_sandbox/net/tls.hpp"

namespace maf_sandbox::net::testing {

inline const SelfSignedAuthority& test_authority() {
    static const SelfSignedAuthority authority =
        generate_self_signed({"localhost", "emulator.test"}, {"127.0.0.1"});
    return authority;
}

inline Task<void> sleep_for(std::chrono::milliseconds duration) {
    boost::asio::steady_timer timer(co_await boost::asio::this_coro::executor, duration);
    co_await timer.async_wait(boost::asio::use_awaitable);
}

inline HttpClientOptions trusting_client() {
    HttpClientOptions options;
    options.ca_pem = test_authority().ca_certificate_pem;
    options.use_system_store = false;
    options.proxy = ProxySettings{};
    return options;
}

inline HttpServerOptions tls_server() {
    HttpServerOptions options;
    options.tls = test_authority().server;
    return options;
}

}  // namespace maf_sandbox::net::testing
