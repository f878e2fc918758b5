// Internal: how the emulator runs blocking work (the engine, the file plane) off its event loop:
// on a worker pool, resuming the awaiting coroutine on its own executor with the result or the
// exception. Also a timer wait that never throws.
#pragma once

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <chrono>
#include <cstdint>
#include <exception>
#include <type_traits>
#include <utility>

#include "maf_sandbox/core/sandbox.hpp"

namespace maf_sandbox::emulator {

// Runs blocking `job` on `pool`. Built on async_initiate rather than a coroutine lambda: GCC 12
// destroys captured temporaries of a co_await expression twice.
template <typename F>
auto offload(boost::asio::thread_pool& pool, F&& job) {
    namespace asio = boost::asio;
    using Fn = std::decay_t<F>;
    using R = std::invoke_result_t<Fn&>;
    using Value = std::conditional_t<std::is_void_v<R>, int, R>;
    return asio::async_initiate<const asio::use_awaitable_t<>&, void(std::exception_ptr, Value)>(
        [&pool](auto handler, Fn fn) {
            asio::post(pool, [fn = std::move(fn), handler = std::move(handler)]() mutable {
                std::exception_ptr failure;
                Value value{};
                try {
                    if constexpr (std::is_void_v<R>) {
                        fn();
                    } else {
                        value = fn();
                    }
                } catch (...) {
                    failure = std::current_exception();
                }
                auto target = asio::get_associated_executor(handler);
                asio::dispatch(target, [handler = std::move(handler), failure,
                                        value = std::move(value)]() mutable {
                    handler(failure, std::move(value));
                });
            });
        },
        asio::use_awaitable, Fn(std::forward<F>(job)));
}

// Waits `ms` on `executor`; a cancelled timer ends the wait early, silently.
inline Task<void> sleep_ms(boost::asio::any_io_executor executor, std::uint64_t ms) {
    boost::asio::steady_timer timer(executor, std::chrono::milliseconds(ms));
    boost::system::error_code ec;
    co_await timer.async_wait(boost::asio::redirect_error(boost::asio::use_awaitable, ec));
}

}  // namespace maf_sandbox::emulator
