// Test plumbing shared by the azure and acas tests: an HttpServer on its own thread (so handlers
// can be scripted while the code under test runs on the test's io_context), a driver that runs
// one awaitable to completion even while servers and pooled connections keep the loop busy, and
// temporary directories.
#pragma once

#include <unistd.h>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <thread>

#include "maf_sandbox/core/run_blocking.hpp"
#include "maf_sandbox/net/http_server.hpp"
#include "maf_sandbox/net/tls.hpp"
#include "test_dirs.hpp"

namespace maf_sandbox::testing {

template <typename T>
T drive(boost::asio::io_context& io, Task<T> task) {
    std::exception_ptr failure;
    std::optional<T> result;
    boost::asio::co_spawn(io, std::move(task), [&](std::exception_ptr e, T value) {
        failure = e;
        if (!e)
            result.emplace(std::move(value));
        io.stop();
    });
    io.restart();
    io.run();
    if (failure)
        std::rethrow_exception(failure);
    return std::move(*result);
}

inline void drive(boost::asio::io_context& io, Task<void> task) {
    std::exception_ptr failure;
    boost::asio::co_spawn(io, std::move(task), [&](std::exception_ptr e) {
        failure = e;
        io.stop();
    });
    io.restart();
    io.run();
    if (failure)
        std::rethrow_exception(failure);
}

// An HttpServer on 127.0.0.1:0 running on its own thread.
class LoopbackServer {
  public:
    explicit LoopbackServer(net::HttpHandler handler, bool tls = false)
        : guard_(io_.get_executor()) {
        net::HttpServerOptions options;
        if (tls) {
            authority_ = net::generate_self_signed();
            options.tls = authority_->server;
        }
        server_ =
            std::make_unique<net::HttpServer>(io_.get_executor(), options, std::move(handler));
        port_ = server_->start();
        thread_ = std::thread([this] { io_.run(); });
    }
    ~LoopbackServer() {
        boost::asio::co_spawn(io_, server_->stop(Seconds{0.2}),
                              [this](std::exception_ptr) { guard_.reset(); });
        thread_.join();
        server_.reset();
    }
    std::string origin() const {
        return std::string(authority_ ? "https" : "http") + "://127.0.0.1:" + std::to_string(port_);
    }
    std::uint16_t port() const { return port_; }
    const std::string& ca_pem() const { return authority_->ca_certificate_pem; }

  private:
    boost::asio::io_context io_;
    boost::asio::executor_work_guard<boost::asio::io_context::executor_type> guard_;
    std::optional<net::SelfSignedAuthority> authority_;
    std::unique_ptr<net::HttpServer> server_;
    std::uint16_t port_ = 0;
    std::thread thread_;
};

}  // namespace maf_sandbox::testing
