// The per-sandbox egress decision log: one JSON object per line, appended by the proxy and read
// back by read_egress_decisions (declared in the public egress header).
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

#include "maf_sandbox/runtime/egress/egress.hpp"
#include "maf_sandbox/runtime/kernel/unique_fd.hpp"

namespace maf_sandbox::runtime {

// One line of the log, without the newline:
// {"time":"2026-11-29T12:00:00.123Z","method":"GET","host":"example.com","port":80,
//  "allowed":true,"reason":"..."}
std::string format_egress_decision(const EgressDecision& decision);

// Cuts `value` to at most `most` bytes, ending in "..." when cut, never inside a UTF-8 character.
std::string truncate_log_field(std::string_view value, std::size_t most);

// The log with its bounds (EgressLogLimits): a rate per second and a total size. Not thread-safe:
// the proxy's one io_context thread appends.
class EgressDecisionLog {
  public:
    using Clock = std::chrono::steady_clock;

    // Opens (creating, mode 0600) `path` for appending. Throws SystemError.
    EgressDecisionLog(const std::filesystem::path& path, const EgressLogLimits& limits = {});
    // Takes `fd`, open for appending; `path` only names it in errors.
    EgressDecisionLog(UniqueFd fd, const std::filesystem::path& path,
                      const EgressLogLimits& limits);

    // Appends one line in one write(2) on an O_APPEND descriptor, so concurrent writers never
    // interleave inside a line, unless the rate or the size bound holds it back (then it counts
    // it). Throws SystemError when the line cannot be written whole.
    void append(const EgressDecision& decision, Clock::time_point now = Clock::now());

    // Writes the "suppressed" line for records held back so far, if any (the proxy calls it once
    // the second they were held back in is over, so a flood that stops is still reported).
    void flush_suppressed();

    // Records held back and not yet reported.
    std::uint64_t pending_suppressed() const noexcept { return suppressed_; }
    // Bytes in the file, as far as this writer knows.
    std::uint64_t size() const noexcept { return size_; }

  private:
    bool write_line(const std::string& line);
    bool fits(std::size_t bytes) const noexcept;
    void mark_full();

    std::filesystem::path path_;
    UniqueFd fd_;
    EgressLogLimits limits_;
    std::uint64_t size_ = 0;
    bool full_ = false;
    Clock::time_point window_start_{};
    std::uint32_t in_window_ = 0;
    std::uint64_t suppressed_ = 0;
};

}  // namespace maf_sandbox::runtime
