// LocalSandbox's streaming exec against real sandboxes: output reaches the caller's sink while the
// program runs, a timeout and the output cap keep the head, and cancelling mid-stream kills the
// tree and leaves the sandbox usable.
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <exception>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
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
using Clock = std::chrono::steady_clock;

ExecRequest shell(std::string command) {
    ExecRequest request;
    request.command = std::move(command);
    return request;
}

// What a sink saw: every chunk, when it arrived, and on which stream.
struct Seen {
    struct Arrival {
        Clock::time_point at;
        ExecStreamName stream;
        std::string bytes;
    };
    std::vector<Arrival> chunks;

    std::string all(ExecStreamName stream) const {
        std::string bytes;
        for (const auto& chunk : chunks) {
            if (chunk.stream == stream) {
                bytes += chunk.bytes;
            }
        }
        return bytes;
    }
};

Task<void> record(Seen& seen, ExecChunk chunk) {
    seen.chunks.push_back({Clock::now(), chunk.stream, std::move(chunk.bytes)});
    co_return;
}

ExecSink sink_into(Seen& seen) {
    return [&seen](ExecChunk chunk) { return record(seen, std::move(chunk)); };
}

class LocalSandboxStream : public ::testing::Test {
  protected:
    void SetUp() override {
        LocalBackendConfig config;
        config.state_dir = state_.path();
        config.memory_bytes = 512ull << 20;
        backend_ = std::make_unique<LocalBackend>(config);
        SandboxSpecFields fields;
        fields.kind = "shell";
        fields.requires_capabilities = {Capability::exec, Capability::streaming_exec};
        sandbox_ =
            run_blocking(backend_->acquire({"stream", "t", "test", ""}, SandboxSpec(fields)));
    }
    void TearDown() override { run_blocking(backend_->dispose_scope("stream", "t")); }

    runtime::testing::StateDir state_;
    std::unique_ptr<LocalBackend> backend_;
    std::shared_ptr<Sandbox> sandbox_;
};

TEST_F(LocalSandboxStream, TheBackendDeclaresStreamingExec) {
    EXPECT_TRUE(backend_->declarations().declares(Capability::streaming_exec));
}

TEST_F(LocalSandboxStream, LinesPrintedEveryTenthOfASecondArriveSpreadOverTheRun) {
    // 30 lines over 3 s. Bunched at the end, every line would arrive after the program ended;
    // streamed, the first arrives seconds before it (the bounds are generous, for a loaded host).
    Seen seen;
    const auto started = Clock::now();
    const auto result = run_blocking(sandbox_->exec_stream(
        shell("for i in $(seq 1 30); do echo line$i; sleep 0.1; done; echo done >&2"),
        sink_into(seen)));
    const auto ended = Clock::now();
    std::string expected;
    for (int i = 1; i <= 30; ++i) {
        expected += fmt::format("line{}\n", i);
    }
    EXPECT_EQ(result.exit_code, 0);
    EXPECT_EQ(result.stdout_bytes, expected);
    EXPECT_EQ(seen.all(ExecStreamName::stdout_stream), expected);
    EXPECT_EQ(seen.all(ExecStreamName::stderr_stream), "done\n");
    ASSERT_GE(seen.chunks.size(), 10u) << "the lines came in a few large chunks";
    ASSERT_GE(ended - started, 2900ms);
    EXPECT_LE(seen.chunks.front().at - started, ended - started - 1500ms)
        << "the first line arrived with the last";
    EXPECT_GE(seen.chunks.back().at - seen.chunks.front().at, 1500ms)
        << "the lines arrived bunched together";
}

TEST_F(LocalSandboxStream, AnEndlessWriterUnderATimeoutReturnsItsHeadWithTheTimeout) {
    Seen seen;
    auto request = shell("yes");
    request.timeout = Seconds(2.0);
    request.max_output_bytes = 64 * 1024;
    try {
        run_blocking(sandbox_->exec_stream(request, sink_into(seen)));
        ADD_FAILURE() << "no timeout";
    } catch (const SandboxExecTimeout& e) {
        EXPECT_EQ(e.stdout_head().size(), 64u * 1024);
        EXPECT_EQ(e.stdout_head().substr(0, 4), "y\ny\n");
        EXPECT_EQ(seen.all(ExecStreamName::stdout_stream), e.stdout_head());
    }
    // The bounded exec reads the same way: the head with the timeout.
    try {
        run_blocking(sandbox_->exec(request));
        ADD_FAILURE() << "no timeout";
    } catch (const SandboxExecTimeout& e) {
        EXPECT_EQ(e.stdout_head().size(), 64u * 1024);
    }
}

TEST_F(LocalSandboxStream, OutputOverTheCapMidStreamDeliversOnlyTheHead) {
    Seen seen;
    auto request = shell("yes 0123456789 | head -c 100000");
    request.max_output_bytes = 1000;
    try {
        run_blocking(sandbox_->exec_stream(request, sink_into(seen)));
        ADD_FAILURE() << "no output-limit error";
    } catch (const ExecOutputLimitExceeded& e) {
        EXPECT_EQ(e.stdout_head().size(), 1000u);
        EXPECT_EQ(seen.all(ExecStreamName::stdout_stream), e.stdout_head());
        EXPECT_EQ(e.total_bytes(), 100000u);
    }
}

TEST_F(LocalSandboxStream, CancellingMidStreamKillsTheTreeAndTheSandboxStaysUsable) {
    const std::vector<std::string> argv{"sleep", fmt::format("5001.{}", ::getpid())};
    asio::io_context io;
    asio::cancellation_signal cancel;
    Seen seen;
    // The sink cancels the exec as soon as the first line is in: mid-stream, program running.
    const ExecSink sink = [&](ExecChunk chunk) {
        if (seen.chunks.empty()) {
            asio::post(io, [&] { cancel.emit(asio::cancellation_type::terminal); });
        }
        return record(seen, std::move(chunk));
    };
    bool done = false;
    std::exception_ptr failure;
    asio::co_spawn(
        io,
        sandbox_->exec_stream(
            shell(fmt::format("{0} {1} & echo started; {0} {1}; wait", argv[0], argv[1])), sink),
        asio::bind_cancellation_slot(cancel.slot(), [&](std::exception_ptr e, const ExecResult&) {
            failure = e;
            done = true;
        }));
    io.run();
    ASSERT_TRUE(done);
    EXPECT_THROW(std::rethrow_exception(failure), boost::system::system_error);
    EXPECT_EQ(seen.all(ExecStreamName::stdout_stream), "started\n");
    EXPECT_TRUE(testing::poll_until([&] { return testing::processes_with_argv(argv) == 0; }, 10s));
    EXPECT_EQ(run_blocking(sandbox_->exec(shell("echo ok"))).stdout_bytes, "ok\n");
}

// A sink slower than the program: the supervisor's writes wait for the host, the program's
// pipes fill, and the deadline still ends the exec as a timeout (not as a host that stopped
// answering), with the head that was delivered.
TEST_F(LocalSandboxStream, ASlowSinkDoesNotHoldTheExecPastItsTimeout) {
    Seen seen;
    const ExecSink sink = [&seen](ExecChunk chunk) -> Task<void> {
        asio::steady_timer pause(co_await asio::this_coro::executor, 100ms);
        co_await pause.async_wait(asio::use_awaitable);
        seen.chunks.push_back({Clock::now(), chunk.stream, std::move(chunk.bytes)});
    };
    auto request = shell("yes");
    request.timeout = Seconds(1.0);
    request.max_output_bytes = 16u << 20;
    try {
        run_blocking(sandbox_->exec_stream(request, sink));
        ADD_FAILURE() << "no timeout";
    } catch (const SandboxExecTimeout& e) {
        EXPECT_FALSE(e.stdout_head().empty());
        EXPECT_EQ(seen.all(ExecStreamName::stdout_stream), e.stdout_head());
        EXPECT_LT(e.stdout_head().size(), 16u << 20) << "the program was not held back";
    }
    EXPECT_EQ(run_blocking(sandbox_->exec(shell("echo ok"))).stdout_bytes, "ok\n");
}

TEST_F(LocalSandboxStream, ASinkThatThrowsEndsTheExecWithItsError) {
    const ExecSink sink = [](ExecChunk) -> Task<void> {
        throw InvalidArgument("the sink refused");
        co_return;
    };
    EXPECT_THROW(run_blocking(sandbox_->exec_stream(shell("echo one; sleep 30"), sink)),
                 InvalidArgument);
    EXPECT_EQ(run_blocking(sandbox_->exec(shell("echo ok"))).stdout_bytes, "ok\n");
}

}  // namespace
}  // namespace maf_sandbox::local
