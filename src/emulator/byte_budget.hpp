// Internal: one emulator-wide budget of bytes the file plane's requests hold at once, so that N
// parallel requests cannot multiply a per-request cap. A request takes its share before it
// allocates and gives it back when its buffers are gone (a Hold, RAII).
#pragma once

#include <boost/asio/any_io_executor.hpp>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <utility>

#include "maf_sandbox/core/sandbox.hpp"

namespace maf_sandbox::emulator {

class ByteBudget : public std::enable_shared_from_this<ByteBudget> {
  public:
    // A share of the budget, given back on destruction.
    class Hold {
      public:
        Hold() = default;
        Hold(std::shared_ptr<ByteBudget> budget, std::uint64_t bytes)
            : budget_(std::move(budget)), bytes_(bytes) {}
        Hold(Hold&& other) noexcept
            : budget_(std::move(other.budget_)), bytes_(std::exchange(other.bytes_, 0)) {}
        Hold& operator=(Hold&& other) noexcept;
        Hold(const Hold&) = delete;
        Hold& operator=(const Hold&) = delete;
        ~Hold() { release(); }
        std::uint64_t bytes() const { return bytes_; }

      private:
        void release();
        std::shared_ptr<ByteBudget> budget_;
        std::uint64_t bytes_ = 0;
    };

    explicit ByteBudget(std::uint64_t total) : total_(total) {}

    // Takes `bytes` (at most the whole budget: a request larger than it waits to be alone) or
    // nothing when that much is not free now.
    std::optional<Hold> try_take(std::uint64_t bytes);
    // Takes `bytes`, waiting up to a second for others to give theirs back; then refuses 429
    // with Retry-After, which every ACAS client waits out and retries.
    Task<Hold> take(boost::asio::any_io_executor executor, std::uint64_t bytes);

    std::uint64_t total() const { return total_; }
    std::uint64_t in_use() const;

  private:
    void give_back(std::uint64_t bytes);

    const std::uint64_t total_;
    mutable std::mutex mutex_;
    std::uint64_t used_ = 0;
};

}  // namespace maf_sandbox::emulator
