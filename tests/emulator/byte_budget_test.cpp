// The file plane's emulator-wide in-flight budget (byte_budget.hpp): shares are taken and given
// back exactly, a request larger than the whole budget waits to be alone instead of never
// running, and a request that finds the budget full waits briefly, then is refused 429 with
// Retry-After (which every ACAS client waits out and retries), or runs once a share comes back.
#include <gtest/gtest.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_future.hpp>
#include <optional>

#include "byte_budget.hpp"
#include "refusal.hpp"

namespace maf_sandbox::emulator {
namespace {

TEST(ByteBudget, SharesAreTakenAndGivenBackExactly) {
    auto budget = std::make_shared<ByteBudget>(100);
    auto a = budget->try_take(60);
    ASSERT_TRUE(a);
    EXPECT_EQ(budget->in_use(), 60u);
    EXPECT_FALSE(budget->try_take(41)) << "a share past the budget was granted";
    {
        auto b = budget->try_take(40);
        ASSERT_TRUE(b);
        EXPECT_EQ(budget->in_use(), 100u);
    }
    EXPECT_EQ(budget->in_use(), 60u);
    ByteBudget::Hold moved = std::move(*a);
    a.reset();
    EXPECT_EQ(budget->in_use(), 60u) << "a moved share was given back twice";
    moved = ByteBudget::Hold();
    EXPECT_EQ(budget->in_use(), 0u);
}

TEST(ByteBudget, ARequestLargerThanTheBudgetRunsAlone) {
    auto budget = std::make_shared<ByteBudget>(100);
    auto whole = budget->try_take(1000);
    ASSERT_TRUE(whole);
    EXPECT_EQ(whole->bytes(), 100u);
    EXPECT_FALSE(budget->try_take(1));
}

TEST(ByteBudget, AFullBudgetIsRefused429WithRetryAfterAfterABriefWait) {
    auto budget = std::make_shared<ByteBudget>(100);
    auto all = budget->try_take(100);
    boost::asio::io_context io;
    auto future =
        boost::asio::co_spawn(io, budget->take(io.get_executor(), 1), boost::asio::use_future);
    io.run();
    try {
        future.get();
        FAIL() << "a full budget granted a share";
    } catch (const Refusal& refusal) {
        EXPECT_EQ(refusal.status, 429);
        EXPECT_EQ(refusal.code, "TooManyRequests");
        EXPECT_EQ(refusal.retry_after_s, 1);
        EXPECT_NE(refusal.message.find("--file-budget-bytes"), std::string::npos);
    }
    EXPECT_EQ(budget->in_use(), 100u);
}

TEST(ByteBudget, AWaitingRequestRunsOnceAShareComesBack) {
    auto budget = std::make_shared<ByteBudget>(100);
    std::optional<ByteBudget::Hold> all = budget->try_take(100);
    boost::asio::io_context io;
    // Given back from the same loop the waiter polls on, well inside its wait.
    boost::asio::steady_timer release(io, std::chrono::milliseconds(50));
    release.async_wait([&all](const boost::system::error_code&) { all.reset(); });
    auto future =
        boost::asio::co_spawn(io, budget->take(io.get_executor(), 30), boost::asio::use_future);
    io.run();
    const auto hold = future.get();
    EXPECT_EQ(hold.bytes(), 30u);
    EXPECT_EQ(budget->in_use(), 30u);
}

}  // namespace
}  // namespace maf_sandbox::emulator
