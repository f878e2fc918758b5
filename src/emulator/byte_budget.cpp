#include "byte_budget.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>

#include "maf_sandbox/core/off_loop.hpp"
#include "refusal.hpp"
#include "timer_wait.hpp"

namespace maf_sandbox::emulator {

ByteBudget::Hold& ByteBudget::Hold::operator=(Hold&& other) noexcept {
    if (this != &other) {
        release();
        budget_ = std::move(other.budget_);
        bytes_ = std::exchange(other.bytes_, 0);
    }
    return *this;
}

void ByteBudget::Hold::release() {
    if (budget_ && bytes_ > 0) {
        budget_->give_back(bytes_);
    }
    budget_.reset();
    bytes_ = 0;
}

std::optional<ByteBudget::Hold> ByteBudget::try_take(std::uint64_t bytes) {
    bytes = std::min(bytes, total_);
    std::lock_guard lock(mutex_);
    if (used_ + bytes > total_) {
        return std::nullopt;
    }
    used_ += bytes;
    return Hold(shared_from_this(), bytes);
}

Task<ByteBudget::Hold> ByteBudget::take(boost::asio::any_io_executor executor,
                                        std::uint64_t bytes) {
    // Requests give their share back within milliseconds (a write, a listing) or a read piece at
    // a time, so a short wait absorbs a burst; a client told to retry waits a whole second.
    constexpr int kTries = 50;
    constexpr std::uint64_t kPauseMs = 20;
    for (int attempt = 0;; ++attempt) {
        if (auto hold = try_take(bytes)) {
            co_return std::move(*hold);
        }
        if (attempt == kTries) {
            break;
        }
        co_await sleep_ms(executor, kPauseMs);
    }
    Refusal refusal{429, "TooManyRequests",
                    fmt::format("The emulator's file plane holds its whole in-flight budget of {} "
                                "bytes; retry after a second, or raise --file-budget-bytes.",
                                total_)};
    refusal.retry_after_s = 1;
    throw refusal;
}

std::uint64_t ByteBudget::in_use() const {
    std::lock_guard lock(mutex_);
    return used_;
}

void ByteBudget::give_back(std::uint64_t bytes) {
    std::lock_guard lock(mutex_);
    used_ -= std::min(used_, bytes);
}

}  // namespace maf_sandbox::emulator
