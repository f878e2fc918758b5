// Running blocking work (socket waits, file copies, process teardown) on a thread pool while the
// calling coroutine waits, so the event loop never blocks. The caller resumes on its own executor
// with the work's result or its exception.
#pragma once

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <memory>
#include <type_traits>
#include <utility>

#include "maf_sandbox/core/sandbox.hpp"

namespace maf_sandbox {

// Deliberately not a coroutine itself: GCC 12 mishandles callable coroutine parameters (double
// destruction), so the work is parked in a shared_ptr that the pool-side coroutine owns.
template <typename F>
Task<std::invoke_result_t<F>> off_loop(boost::asio::thread_pool& pool, F work) {
    using R = std::invoke_result_t<F>;
    auto shared = std::make_shared<F>(std::move(work));
    return boost::asio::co_spawn(
        pool.get_executor(), [shared]() -> Task<R> { co_return (*shared)(); },
        boost::asio::use_awaitable);
}

// The same for work that is itself a coroutine (`work()` returns a Task): the whole coroutine runs
// on the pool, so every step it awaits without suspending costs no further thread hop.
template <typename F>
std::invoke_result_t<F> off_loop_task(boost::asio::thread_pool& pool, F work) {
    using T = std::invoke_result_t<F>;
    auto shared = std::make_shared<F>(std::move(work));
    return boost::asio::co_spawn(
        pool.get_executor(), [shared]() -> T { co_return co_await (*shared)(); },
        boost::asio::use_awaitable);
}

}  // namespace maf_sandbox
