// Internal: a timer wait that never throws, for the emulator's retries, delays and injected
// latency. Blocking work goes off the loop through core's off_loop (core/off_loop.hpp).
#pragma once

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <chrono>
#include <cstdint>

#include "maf_sandbox/core/sandbox.hpp"

namespace maf_sandbox::emulator {

// Waits `ms` on `executor`; a cancelled timer ends the wait early, silently.
inline Task<void> sleep_ms(boost::asio::any_io_executor executor, std::uint64_t ms) {
    boost::asio::steady_timer timer(executor, std::chrono::milliseconds(ms));
    boost::system::error_code ec;
    co_await timer.async_wait(boost::asio::redirect_error(boost::asio::use_awaitable, ec));
}

}  // namespace maf_sandbox::emulator
