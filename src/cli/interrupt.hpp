// SIGINT and SIGTERM during a one-shot `run`: the command's steps are raced against the signal, so
// a Ctrl-C cancels the step in flight (an exec's connection is closed, which kills its process
// tree) and unwinds through the run's own cleanup, which disposes of its sandbox before the CLI
// exits with 128 + the signal's number, as a shell reports a program a signal ended.
#pragma once

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <stdexcept>
#include <string>
#include <utility>
#include <variant>

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
// cancelled and has run its own cleanup).
template <typename T>
T run_interruptibly(boost::asio::io_context& io, InterruptWatch& watch, Task<T> task) {
    using namespace boost::asio::experimental::awaitable_operators;
    auto raced = [](InterruptWatch& watch, Task<T> task) -> Task<T> {
        auto signal = watch.signals().async_wait(boost::asio::as_tuple(boost::asio::use_awaitable));
        if constexpr (std::is_void_v<T>) {
            auto outcome = co_await (std::move(task) || std::move(signal));
            if (outcome.index() == 1) {
                throw Interrupted(std::get<1>(std::get<1>(outcome)));
            }
        } else {
            auto outcome = co_await (std::move(task) || std::move(signal));
            if (outcome.index() == 1) {
                throw Interrupted(std::get<1>(std::get<1>(outcome)));
            }
            co_return std::move(std::get<0>(outcome));
        }
    };
    return run_blocking(io, raced(watch, std::move(task)));
}

}  // namespace maf_sandbox::cli
