// LocalSandbox's exec on the caller's executor (no thread pool): output, the cap, the deadline,
// cancellation and disposal through the asynchronous client, against real sandboxes.
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "maf_sandbox/core/errors.hpp"
#include "maf_sandbox/core/run_blocking.hpp"
#include "maf_sandbox/local/local_backend.hpp"
#include "polling.hpp"
#include "process_probe.hpp"
#include "sandbox_fixture.hpp"

namespace maf_sandbox::local {
namespace {

namespace asio = boost::asio;
using namespace std::chrono_literals;

// `sleep <unique>`: a guest process the host can find by its exact argv (unique per test and per
// test process, so concurrent runs never see each other's).
std::vector<std::string> marker(int test) {
    return {"sleep", fmt::format("{}.{}", 4000 + test, ::getpid())};
}

std::string marker_command(const std::vector<std::string>& argv) {
    // Two of them, one in the background: the whole tree must go, not just the leader.
    return fmt::format("{0} {1} & {0} {1}; wait", argv[0], argv[1]);
}

ExecRequest shell(std::string command) {
    ExecRequest request;
    request.command = std::move(command);
    return request;
}

class LocalSandboxExec : public ::testing::Test {
  protected:
    void SetUp() override {
        LocalBackendConfig config;
        config.state_dir = state_.path();
        config.memory_bytes = 512ull << 20;
        backend_ = std::make_unique<LocalBackend>(config);
        SandboxSpecFields fields;
        fields.kind = "shell";
        sandbox_ =
            run_blocking(backend_->acquire({"exec", "async", "test", ""}, SandboxSpec(fields)));
    }
    void TearDown() override { run_blocking(backend_->dispose_scope("exec", "async")); }

    runtime::testing::StateDir state_;
    std::unique_ptr<LocalBackend> backend_;
    std::shared_ptr<Sandbox> sandbox_;
};

TEST_F(LocalSandboxExec, StdinOutputAndExitCodeRoundTrip) {
    auto request = shell("cat; echo err >&2; exit 7");
    request.stdin_bytes = "hello";
    const auto result = run_blocking(sandbox_->exec(request));
    EXPECT_EQ(result.stdout_bytes, "hello");
    EXPECT_EQ(result.stderr_bytes, "err\n");
    EXPECT_EQ(result.exit_code, 7);
}

TEST_F(LocalSandboxExec, OutputOverTheCapRaisesWithTheHeadKept) {
    auto request = shell("yes 0123456789 | head -c 100000");
    request.max_output_bytes = 1000;
    std::string expected;
    while (expected.size() < 1000) {
        expected += "0123456789\n";
    }
    expected.resize(1000);
    try {
        run_blocking(sandbox_->exec(request));
        ADD_FAILURE() << "no output-limit error";
    } catch (const ExecOutputLimitExceeded& e) {
        EXPECT_EQ(e.stdout_head(), expected);
        EXPECT_EQ(e.total_bytes(), 100000u);
    }
}

TEST_F(LocalSandboxExec, TimeoutKillsTheTreeAndRaisesTimeout) {
    const auto argv = marker(1);
    auto request = shell(marker_command(argv));
    request.timeout = Seconds(0.5);
    EXPECT_THROW(run_blocking(sandbox_->exec(request)), Timeout);
    EXPECT_TRUE(testing::poll_until([&] { return testing::processes_with_argv(argv) == 0; }, 10s));
}

TEST_F(LocalSandboxExec, CancellingTheAwaitingCoroutineClosesTheConnectionAndKillsTheTree) {
    const auto argv = marker(2);
    asio::io_context io;
    asio::cancellation_signal cancel;
    bool done = false;
    std::exception_ptr failure;
    asio::co_spawn(
        io, sandbox_->exec(shell(marker_command(argv))),
        asio::bind_cancellation_slot(cancel.slot(), [&](std::exception_ptr e, const ExecResult&) {
            failure = e;
            done = true;
        }));
    ASSERT_TRUE(testing::poll_until(
        [&] {
            io.run_for(10ms);
            return testing::processes_with_argv(argv) == 2;
        },
        10s));
    cancel.emit(asio::cancellation_type::terminal);
    io.run();
    ASSERT_TRUE(done);
    EXPECT_THROW(std::rethrow_exception(failure), boost::system::system_error);
    EXPECT_TRUE(testing::poll_until([&] { return testing::processes_with_argv(argv) == 0; }, 10s));
    // The sandbox is unharmed: the next exec runs.
    EXPECT_EQ(run_blocking(sandbox_->exec(shell("echo ok"))).stdout_bytes, "ok\n");
}

TEST_F(LocalSandboxExec, LosingARaceWithATimerKillsTheTree) {
    using namespace asio::experimental::awaitable_operators;
    const auto argv = marker(3);
    auto race = [&]() -> Task<bool> {
        asio::steady_timer timer(co_await asio::this_coro::executor, 1s);
        auto exec = sandbox_->exec(shell(marker_command(argv)));
        auto wait = timer.async_wait(asio::use_awaitable);
        auto either = std::move(exec) || std::move(wait);
        const auto first = co_await std::move(either);
        co_return first.index() == 1;
    };
    EXPECT_TRUE(run_blocking(race()));
    EXPECT_TRUE(testing::poll_until([&] { return testing::processes_with_argv(argv) == 0; }, 10s));
}

TEST_F(LocalSandboxExec, DestroyingTheAwaitingCoroutineKillsTheTree) {
    const auto argv = marker(4);
    {
        asio::io_context io;
        asio::co_spawn(io, sandbox_->exec(shell(marker_command(argv))), asio::detached);
        ASSERT_TRUE(testing::poll_until(
            [&] {
                io.run_for(10ms);
                return testing::processes_with_argv(argv) == 2;
            },
            10s));
    }  // the io_context goes with the suspended coroutine, its frame and its connection
    EXPECT_TRUE(testing::poll_until([&] { return testing::processes_with_argv(argv) == 0; }, 10s));
}

TEST_F(LocalSandboxExec, ADisposedSandboxIsUnreachable) {
    run_blocking(backend_->dispose_scope("exec", "async"));
    EXPECT_THROW(run_blocking(sandbox_->exec(shell("true"))), SandboxOutputUnreachable);
}

}  // namespace
}  // namespace maf_sandbox::local
