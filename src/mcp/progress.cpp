#include "progress.hpp"

#include <fmt/format.h>

#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "maf_sandbox/core/utf8.hpp"

namespace maf_sandbox::mcp::detail {
namespace {

constexpr std::string_view kStderrMark = "stderr: ";
// Room kept in every message for the note saying how many lines were dropped.
constexpr std::size_t kNoteReserve = 48;

std::size_t index_of(ExecStreamName stream) {
    return stream == ExecStreamName::stdout_stream ? 0 : 1;
}

// The last `max` bytes of valid UTF-8 text, starting on a code point.
std::string tail_within(std::string text, std::size_t max) {
    if (text.size() <= max) {
        return text;
    }
    auto start = text.size() - max;
    while (start < text.size() && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) {
        ++start;
    }
    return text.substr(start);
}

}  // namespace

ProgressPump::ProgressPump(ProgressSend send, ProgressLimits limits)
    : send_(std::move(send)),
      limits_(limits),
      started_(std::chrono::steady_clock::now()),
      last_sent_(started_) {}

void ProgressPump::stage(std::string_view message) {
    flush();
    send(std::string(message));
}

void ProgressPump::output(ExecStreamName stream, std::string_view bytes) {
    auto& partial = partial_[index_of(stream)];
    while (!bytes.empty()) {
        const auto newline = bytes.find('\n');
        const auto piece = bytes.substr(0, newline);
        // A line longer than a whole message is held in message-sized parts, so no buffer here
        // grows with what the program writes.
        const auto room = budget() - std::min(partial.size(), budget());
        partial.append(piece.substr(0, room));
        if (piece.size() > room) {
            hold(stream, std::move(partial));
            partial.clear();
            bytes.remove_prefix(room);
            continue;
        }
        if (newline == std::string_view::npos) {
            return;
        }
        hold(stream, std::move(partial));
        partial.clear();
        partial_aged_[index_of(stream)] = false;
        bytes.remove_prefix(newline + 1);
    }
}

std::size_t ProgressPump::budget() const {
    return limits_.max_message_bytes - kNoteReserve - kStderrMark.size() - 1;
}

std::size_t ProgressPump::cost(const Line& line) {
    return line.text.size() + 1 +
           (line.stream == ExecStreamName::stderr_stream ? kStderrMark.size() : 0);
}

void ProgressPump::hold(ExecStreamName stream, std::string text) {
    lines_.push_back(Line{stream, std::move(text)});
    held_bytes_ += cost(lines_.back());
    while (held_bytes_ > limits_.max_message_bytes - kNoteReserve && lines_.size() > 1) {
        held_bytes_ -= cost(lines_.front());
        lines_.pop_front();
        ++skipped_;
    }
}

std::string ProgressPump::take_lines() {
    std::string message;
    if (skipped_ > 0) {
        message = fmt::format("({} earlier line(s) not shown)\n", skipped_);
    }
    for (std::size_t i = 0; i < lines_.size(); ++i) {
        if (i > 0) {
            message.push_back('\n');
        }
        if (lines_[i].stream == ExecStreamName::stderr_stream) {
            message.append(kStderrMark);
        }
        message.append(lines_[i].text);
    }
    lines_.clear();
    held_bytes_ = 0;
    skipped_ = 0;
    // Invalid UTF-8 can only grow when replaced; the latest bytes are the ones kept.
    return tail_within(replace_invalid_utf8(message), limits_.max_message_bytes);
}

void ProgressPump::flush() {
    for (auto stream : {ExecStreamName::stdout_stream, ExecStreamName::stderr_stream}) {
        auto& partial = partial_[index_of(stream)];
        if (!partial.empty()) {
            hold(stream, std::move(partial));
            partial.clear();
        }
        partial_aged_[index_of(stream)] = false;
    }
    if (!lines_.empty()) {
        send(take_lines());
    }
}

void ProgressPump::send(std::string message) {
    counter_ += 1;
    last_sent_ = std::chrono::steady_clock::now();
    send_(counter_, std::move(message));
}

Task<void> ProgressPump::run() {
    boost::asio::steady_timer tick(co_await boost::asio::this_coro::executor);
    for (;;) {
        tick.expires_after(limits_.interval);
        co_await tick.async_wait(boost::asio::use_awaitable);
        // An unfinished line held over a whole interval is shown as it is: a prompt or a
        // progress bar may never end its line.
        for (auto stream : {ExecStreamName::stdout_stream, ExecStreamName::stderr_stream}) {
            const auto i = index_of(stream);
            if (!partial_[i].empty() && partial_aged_[i]) {
                hold(stream, std::move(partial_[i]));
                partial_[i].clear();
            }
            partial_aged_[i] = !partial_[i].empty();
        }
        if (!lines_.empty()) {
            send(take_lines());
            continue;
        }
        const auto now = std::chrono::steady_clock::now();
        if (now - last_sent_ >= limits_.heartbeat) {
            const auto seconds =
                std::chrono::duration_cast<std::chrono::seconds>(now - started_).count();
            send(fmt::format("still running after {} s", seconds));
        }
    }
}

}  // namespace maf_sandbox::mcp::detail
