// The progress plumbing of a tool call: what the pump sends while a program prints (coalesced,
// rate-limited, bounded, valid UTF-8, a heartbeat when silent), and the server-sent event stream
// a POST is answered with.
#include <gtest/gtest.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <chrono>
#include <string>
#include <vector>

#include "event_stream.hpp"
#include "maf_sandbox/core/run_blocking.hpp"
#include "maf_sandbox/core/utf8.hpp"
#include "progress.hpp"

namespace maf_sandbox::mcp::detail {
namespace {

namespace asio = boost::asio;
using namespace std::chrono_literals;
using namespace boost::asio::experimental::awaitable_operators;
using Clock = std::chrono::steady_clock;

struct Sent {
    double progress;
    std::string message;
    Clock::time_point at;
};

struct Recorder {
    std::vector<Sent> sent;
    ProgressSend sink() {
        return [this](double progress, std::string message) {
            sent.push_back({progress, std::move(message), Clock::now()});
        };
    }
    std::string all_text() const {
        std::string text;
        for (const auto& s : sent) {
            text += s.message + "\n";
        }
        return text;
    }
};

Task<void> pause(std::chrono::milliseconds how_long) {
    asio::steady_timer timer(co_await asio::this_coro::executor, how_long);
    co_await timer.async_wait(asio::use_awaitable);
}

// Writes `count` lines `line-N`, `every` apart, as a program would.
Task<void> printer(ProgressPump& pump, int count, std::chrono::milliseconds every) {
    for (int i = 0; i < count; ++i) {
        pump.output(ExecStreamName::stdout_stream, "line-" + std::to_string(i) + "\n");
        co_await pause(every);
    }
}

Task<void> print_beside_the_pump(ProgressPump& pump, int count, std::chrono::milliseconds every) {
    co_await (printer(pump, count, every) || pump.run());
    pump.flush();
}

TEST(McpProgressPump, LinesPrintedOverTimeArriveSpreadOutCoalescedAndInOrder) {
    asio::io_context io;
    Recorder recorder;
    ProgressPump pump(recorder.sink(), ProgressLimits{100ms, 5000ms, 4096});
    const auto started = Clock::now();
    run_blocking(io, print_beside_the_pump(pump, 40, 20ms));
    const auto elapsed = Clock::now() - started;
    // 40 lines in about 0.8 s, one notification per 100 ms at most (plus the final flush).
    const auto intervals = std::chrono::duration_cast<std::chrono::milliseconds>(elapsed) / 100ms;
    EXPECT_LE(recorder.sent.size(), static_cast<std::size_t>(intervals) + 2);
    EXPECT_GE(recorder.sent.size(), 3u) << recorder.all_text();
    // Every line, once, in order.
    std::string expected;
    for (int i = 0; i < 40; ++i) {
        expected += "line-" + std::to_string(i) + "\n";
    }
    EXPECT_EQ(recorder.all_text(), expected);
    // Spread over the run, not bunched at its end.
    EXPECT_GE(recorder.sent.back().at - recorder.sent.front().at, elapsed / 2);
    for (std::size_t i = 1; i < recorder.sent.size(); ++i) {
        EXPECT_GT(recorder.sent[i].progress, recorder.sent[i - 1].progress);
    }
}

TEST(McpProgressPump, AFloodKeepsOnlyTheLatestLinesWithinTheMessageCap) {
    Recorder recorder;
    ProgressPump pump(recorder.sink(), ProgressLimits{100ms, 5000ms, 256});
    std::string flood;
    for (int i = 0; i < 10000; ++i) {
        flood += "row " + std::to_string(i) + "\n";
    }
    pump.output(ExecStreamName::stdout_stream, flood);
    pump.flush();
    ASSERT_EQ(recorder.sent.size(), 1u);
    const auto& message = recorder.sent[0].message;
    EXPECT_LE(message.size(), 256u);
    EXPECT_NE(message.find("earlier line(s) not shown"), std::string::npos) << message;
    EXPECT_NE(message.find("row 9999"), std::string::npos) << message;
    EXPECT_EQ(message.find("row 0\n"), std::string::npos) << message;
}

TEST(McpProgressPump, AnEndlessLineIsHeldInBoundedPartsAndInvalidUtf8IsReplaced) {
    Recorder recorder;
    ProgressPump pump(recorder.sink(), ProgressLimits{100ms, 5000ms, 128});
    pump.output(ExecStreamName::stderr_stream, std::string(100000, 'y'));
    pump.output(ExecStreamName::stderr_stream, "y\n\xff\xfe broken\n");
    pump.flush();
    ASSERT_EQ(recorder.sent.size(), 1u);
    const auto& message = recorder.sent[0].message;
    EXPECT_LE(message.size(), 128u);
    EXPECT_TRUE(is_valid_utf8(message));
    EXPECT_NE(message.find("stderr: "), std::string::npos) << message;
    EXPECT_NE(message.find("broken"), std::string::npos) << message;
}

Task<void> silent_for(ProgressPump& pump, std::chrono::milliseconds how_long) {
    co_await (pause(how_long) || pump.run());
}

TEST(McpProgressPump, ASilentProgramGetsHeartbeats) {
    asio::io_context io;
    Recorder recorder;
    ProgressPump pump(recorder.sink(), ProgressLimits{50ms, 300ms, 4096});
    run_blocking(io, silent_for(pump, 1000ms));
    // 1 s of silence with a heartbeat due every 300 ms: two or three of them.
    ASSERT_GE(recorder.sent.size(), 2u);
    EXPECT_LE(recorder.sent.size(), 4u);
    for (const auto& sent : recorder.sent) {
        EXPECT_EQ(sent.message.rfind("still running after ", 0), 0u) << sent.message;
    }
}

Task<void> prompt_then_wait(ProgressPump& pump) {
    pump.output(ExecStreamName::stdout_stream, "Continue? [y/N] ");
    co_await (pause(400ms) || pump.run());
}

TEST(McpProgressPump, AnUnfinishedLineIsShownOnceItWaitedAnInterval) {
    asio::io_context io;
    Recorder recorder;
    ProgressPump pump(recorder.sink(), ProgressLimits{100ms, 5000ms, 4096});
    run_blocking(io, prompt_then_wait(pump));
    ASSERT_EQ(recorder.sent.size(), 1u) << recorder.all_text();
    EXPECT_EQ(recorder.sent[0].message, "Continue? [y/N] ");
}

TEST(McpProgressPump, AStageSendsHeldOutputFirst) {
    Recorder recorder;
    ProgressPump pump(recorder.sink());
    pump.output(ExecStreamName::stdout_stream, "last words\n");
    pump.stage("cleaning up the call directory");
    ASSERT_EQ(recorder.sent.size(), 2u);
    EXPECT_EQ(recorder.sent[0].message, "last words");
    EXPECT_EQ(recorder.sent[1].message, "cleaning up the call directory");
    EXPECT_EQ(pump.sent(), 2.0);
}

TEST(McpEventStream, AcceptListsAreReadWithTheirQualities) {
    EXPECT_TRUE(accepts_event_stream("application/json, text/event-stream"));
    EXPECT_TRUE(accepts_event_stream("Text/Event-Stream;q=0.5"));
    EXPECT_TRUE(accepts_event_stream("*/*"));
    EXPECT_FALSE(accepts_event_stream("application/json"));
    EXPECT_FALSE(accepts_event_stream("text/event-stream;q=0, application/json"));
    EXPECT_FALSE(accepts_event_stream("text/event-streamer"));
    EXPECT_FALSE(accepts_event_stream(std::nullopt));
}

Task<std::vector<std::string>> drain(std::shared_ptr<EventStream> stream) {
    std::vector<std::string> pieces;
    for (;;) {
        auto piece = co_await stream->next();
        if (piece.empty()) {
            co_return pieces;
        }
        pieces.emplace_back(piece);
    }
}

Task<void> produce(std::weak_ptr<EventStream> weak) {
    co_await pause(20ms);
    if (auto stream = weak.lock()) {
        stream->notify(R"({"method":"notifications/progress"})");
    }
    co_await pause(20ms);
    if (auto stream = weak.lock()) {
        stream->respond(R"({"id":1,"result":{}})");
        stream->notify("after the end");
    }
}

TEST(McpEventStream, NotificationsThenTheResponseThenTheEnd) {
    asio::io_context io;
    auto stream = std::make_shared<EventStream>(io.get_executor(), 1024);
    asio::co_spawn(io, produce(stream), asio::detached);
    auto pieces = run_blocking(io, drain(stream));
    ASSERT_EQ(pieces.size(), 2u);
    EXPECT_EQ(pieces[0], "event: message\ndata: {\"method\":\"notifications/progress\"}\n\n");
    EXPECT_EQ(pieces[1], "event: message\ndata: {\"id\":1,\"result\":{}}\n\n");
}

TEST(McpEventStream, ASlowReaderLosesProgressNeverTheResponse) {
    asio::io_context io;
    auto stream = std::make_shared<EventStream>(io.get_executor(), 200);
    for (int i = 0; i < 100; ++i) {
        stream->notify(std::string(50, 'p'));
    }
    stream->respond("answer");
    auto pieces = run_blocking(io, drain(stream));
    ASSERT_GE(pieces.size(), 2u);
    EXPECT_LE(pieces.size(), 4u);
    EXPECT_EQ(pieces.back(), "event: message\ndata: answer\n\n");
}

}  // namespace
}  // namespace maf_sandbox::mcp::detail
