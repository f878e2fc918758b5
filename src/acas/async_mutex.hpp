// A mutex for coroutines that may run on different io_contexts: acquire for one key and kind is
// serialised across loops, and a waiter cancelled while queued leaves the queue cleanly.
#pragma once

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <deque>
#include <memory>
#include <mutex>

#include "maf_sandbox/core/sandbox.hpp"

namespace maf_sandbox::acas::detail {

class AsyncMutex : public std::enable_shared_from_this<AsyncMutex> {
  public:
    class Guard {
      public:
        Guard() = default;
        explicit Guard(std::shared_ptr<AsyncMutex> owner) : owner_(std::move(owner)) {}
        Guard(Guard&& other) noexcept : owner_(std::move(other.owner_)) {}
        Guard& operator=(Guard&& other) noexcept {
            release();
            owner_ = std::move(other.owner_);
            return *this;
        }
        ~Guard() { release(); }
        void release() {
            if (owner_) {
                owner_->unlock();
                owner_.reset();
            }
        }

      private:
        std::shared_ptr<AsyncMutex> owner_;
    };

    Task<Guard> lock() {
        auto executor = co_await boost::asio::this_coro::executor;
        std::shared_ptr<Waiter> waiter;
        {
            std::lock_guard lock(mutex_);
            if (!locked_) {
                locked_ = true;
                co_return Guard(shared_from_this());
            }
            waiter = std::make_shared<Waiter>(executor);
            waiters_.push_back(waiter);
        }
        boost::system::error_code error;
        co_await waiter->timer.async_wait(
            boost::asio::redirect_error(boost::asio::use_awaitable, error));
        {
            std::lock_guard lock(mutex_);
            if (waiter->granted) {
                co_return Guard(shared_from_this());
            }
            std::erase(waiters_, waiter);
        }
        throw boost::system::system_error(boost::asio::error::operation_aborted,
                                          "waiting for an acquire lock was cancelled");
    }

    bool busy() const {
        std::lock_guard lock(mutex_);
        return locked_;
    }

  private:
    struct Waiter {
        explicit Waiter(boost::asio::any_io_executor executor) : timer(executor) {
            timer.expires_at(boost::asio::steady_timer::time_point::max());
        }
        boost::asio::steady_timer timer;
        bool granted = false;
    };

    void unlock() {
        std::shared_ptr<Waiter> next;
        {
            std::lock_guard lock(mutex_);
            if (waiters_.empty()) {
                locked_ = false;
                return;
            }
            next = waiters_.front();
            waiters_.pop_front();
            next->granted = true;
        }
        boost::asio::post(next->timer.get_executor(), [next] { next->timer.cancel(); });
    }

    mutable std::mutex mutex_;
    bool locked_ = false;
    std::deque<std::shared_ptr<Waiter>> waiters_;
};

}  // namespace maf_sandbox::acas::detail
