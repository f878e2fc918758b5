// Shared helpers for the net tests: one io_context per test, a TLS authority minted once.
#pragma once

#include <gtest/gtest.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <chrono>
#include <exception>
#include <optional>

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

// Runs `task` on `io` until it finishes (servers keep `io` busy forever, so io.run() alone would
// never return) and returns its result or rethrows its exception.
template <typename T>
T run_until_done(boost::asio::io_context& io, Task<T> task) {
    std::exception_ptr failure;
    std::optional<T> result;
    bool done = false;
    boost::asio::co_spawn(io, std::move(task), [&](std::exception_ptr e, T value) {
        failure = e;
        if (!e) {
            result.emplace(std::move(value));
        }
        done = true;
    });
    io.restart();
    while (!done && io.run_one() > 0) {
    }
    if (failure) {
        std::rethrow_exception(failure);
    }
    return std::move(*result);
}

inline void run_until_done(boost::asio::io_context& io, Task<void> task) {
    std::exception_ptr failure;
    bool done = false;
    boost::asio::co_spawn(io, std::move(task), [&](std::exception_ptr e) {
        failure = e;
        done = true;
    });
    io.restart();
    while (!done && io.run_one() > 0) {
    }
    if (failure) {
        std::rethrow_exception(failure);
    }
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
