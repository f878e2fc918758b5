// SIGINT and SIGTERM during a one-shot `run`: the command's steps are raced against the signal, so
// a Ctrl-C cancels the step in flight (an exec's connection is closed, which kills its process
// tree) and unwinds through the run's own cleanup, which disposes of its sandbox before the CLI
// exits with 128 + the signal's number, as a shell reports a program a signal ended.
#pragma once

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/deferred.hpp>
#include <boost/asio/experimental/parallel_group.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <stdexcept>
#include <type_traits>
#include <utility>

#include "maf_sandbox/core/run_blocking.hpp"

namespace maf_sandbox::cli {

// Thrown by run_interruptibly when the signal won; main turns it into exit status 128 + signal.
class Interrupted : public std::runtime_error {
  public:
    explicit Interrupted(int signal);
    int signal() const noexcept { return signal_; }
    int exit_status() const noexcept { return 128 + signal_; }

  private:
    int signal_;
};

// Catches SIGINT and SIGTERM for as long as it lives (a signal that arrives between two steps is
// kept for the next one). Create it before whatever must be cleaned up, so that it outlives that
// cleanup: a signal during the cleanup itself then waits for it instead of killing the process.
class InterruptWatch {
  public:
    explicit InterruptWatch(boost::asio::io_context& io);
    boost::asio::signal_set& signals() noexcept { return signals_; }

  private:
    boost::asio::signal_set signals_;
};

// run_blocking(io, task), or Interrupted when a watched signal arrives first (the task is then
// cancelled and has run its own cleanup). The task's own failure ends the race too: the awaitable
// operators' `||` would wait for the first success, so a failing step would wait for a signal.
template <typename T>
T run_interruptibly(boost::asio::io_context& io, InterruptWatch& watch, Task<T> task) {
    namespace asio = boost::asio;
    auto raced = [](InterruptWatch& watch, Task<T> task) -> Task<T> {
        auto executor = co_await asio::this_coro::executor;
        auto step = asio::co_spawn(executor, std::move(task), asio::deferred);
        auto signal = watch.signals().async_wait(asio::deferred);
        auto race = asio::experimental::make_parallel_group(std::move(step), std::move(signal));
        if constexpr (std::is_void_v<T>) {
            auto [order, failure, signal_error, number] =
                co_await race.async_wait(asio::experimental::wait_for_one(), asio::use_awaitable);
            if (order[0] == 1) {
                throw Interrupted(number);
            }
            if (failure) {
                std::rethrow_exception(failure);
            }
        } else {
            auto [order, failure, value, signal_error, number] =
                co_await race.async_wait(asio::experimental::wait_for_one(), asio::use_awaitable);
            if (order[0] == 1) {
                throw Interrupted(number);
            }
            if (failure) {
                std::rethrow_exception(failure);
            }
            co_return std::move(value);
        }
    };
    return run_blocking(io, raced(watch, std::move(task)));
}

}  // namespace maf_sandbox::cli
