// The progress notifications of one tool call (private to src/mcp): the call's stages, the
// program's latest output lines while it runs, and a heartbeat while nothing else is said, so a
// client whose request timeout resets on progress keeps waiting for a long call.
#pragma once

#include <chrono>
#include <cstddef>
#include <deque>
#include <functional>
#include <string>
#include <string_view>

#include "maf_sandbox/core/sandbox.hpp"

namespace maf_sandbox::mcp::detail {

struct ProgressLimits {
    // Output is sent at most once per interval, the lines written meanwhile coalesced into one
    // notification.
    std::chrono::milliseconds interval{250};
    // With nothing else sent for this long, a heartbeat says the call is still running.
    std::chrono::milliseconds heartbeat{5000};
    // The most one notification's message carries; the latest lines are kept.
    std::size_t max_message_bytes = 4096;
};

// Sends one notifications/progress: its counter (which grows with every notification) and
// message (valid UTF-8).
using ProgressSend = std::function<void(double progress, std::string message)>;

// Single-threaded: used from the executor the call runs on.
class ProgressPump {
  public:
    ProgressPump(ProgressSend send, ProgressLimits limits = {});

    // A step of the call ("acquiring the sandbox"): sent at once, after any output still held.
    void stage(std::string_view message);

    // A piece of the program's output. Only buffered: run() sends it. Bounded: past
    // max_message_bytes the oldest held lines are dropped and counted.
    void output(ExecStreamName stream, std::string_view bytes);

    // Sends the held output each interval and a heartbeat when due; returns only when cancelled.
    Task<void> run();

    // Sends whatever output is held now, a partial last line included.
    void flush();

    double sent() const { return counter_; }

  private:
    struct Line {
        ExecStreamName stream;
        std::string text;
    };
    // The most one held line may carry.
    std::size_t budget() const;
    static std::size_t cost(const Line& line);
    void hold(ExecStreamName stream, std::string text);
    void send(std::string message);
    std::string take_lines();

    ProgressSend send_;
    ProgressLimits limits_;
    double counter_ = 0;
    std::chrono::steady_clock::time_point started_;
    std::chrono::steady_clock::time_point last_sent_;
    std::deque<Line> lines_;
    std::size_t held_bytes_ = 0;
    std::size_t skipped_ = 0;
    // The unfinished last line of each stream, and whether it was already held at the previous
    // tick (then it is sent as it is rather than waiting for its end).
    std::string partial_[2];
    bool partial_aged_[2] = {false, false};
};

}  // namespace maf_sandbox::mcp::detail
