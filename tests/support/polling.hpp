// Waiting for a condition the way every test here must: polled, with a deadline, never a fixed
// sleep standing in for the condition. The step only spaces the polls; the limit is generous
// because a loaded 2-core machine is slow, and it is never a measure of speed.
#pragma once

#include <chrono>
#include <functional>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

namespace maf_sandbox::testing {

// Polls `condition` every `step` until it holds (true) or `limit` has passed (false; the
// condition is asked once more at the deadline).
bool poll_until(const std::function<bool()>& condition, std::chrono::milliseconds limit,
                std::chrono::milliseconds step = std::chrono::milliseconds(10));

// The same on the caller's event loop, for a coroutine that must not block it.
inline boost::asio::awaitable<bool> poll_until_async(
    std::function<bool()> condition, std::chrono::milliseconds limit = std::chrono::seconds(10),
    std::chrono::milliseconds step = std::chrono::milliseconds(5)) {
    boost::asio::steady_timer timer(co_await boost::asio::this_coro::executor);
    const auto deadline = std::chrono::steady_clock::now() + limit;
    while (!condition()) {
        if (std::chrono::steady_clock::now() >= deadline) {
            co_return false;
        }
        timer.expires_after(step);
        co_await timer.async_wait(boost::asio::use_awaitable);
    }
    co_return true;
}

}  // namespace maf_sandbox::testing
