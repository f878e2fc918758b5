// Runs one awaitable to completion on a private io_context and returns its result (or rethrows
// its exception). For front ends and tests only: library code stays asynchronous.
#pragma once

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <exception>
#include <optional>
#include <utility>

#include "maf_sandbox/core/sandbox.hpp"

namespace maf_sandbox {

template <typename T>
T run_blocking(boost::asio::io_context& io, Task<T> task) {
    std::exception_ptr failure;
    std::optional<T> result;
    boost::asio::co_spawn(io, std::move(task), [&](std::exception_ptr e, T value) {
        failure = e;
        if (!e) {
            result.emplace(std::move(value));
        }
    });
    io.restart();
    io.run();
    if (failure) {
        std::rethrow_exception(failure);
    }
    return std::move(*result);
}

inline void run_blocking(boost::asio::io_context& io, Task<void> task) {
    std::exception_ptr failure;
    boost::asio::co_spawn(io, std::move(task), [&](std::exception_ptr e) { failure = e; });
    io.restart();
    io.run();
    if (failure) {
        std::rethrow_exception(failure);
    }
}

template <typename T>
T run_blocking(Task<T> task) {
    boost::asio::io_context io;
    return run_blocking(io, std::move(task));
}

inline void run_blocking(Task<void> task) {
    boost::asio::io_context io;
    run_blocking(io, std::move(task));
}

}  // namespace maf_sandbox
