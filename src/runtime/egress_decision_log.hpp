// The per-sandbox egress decision log: one JSON object per line, appended by the proxy and read
// back by read_egress_decisions (declared in the public egress header).
#pragma once

#include <filesystem>
#include <string>

#include "maf_sandbox/runtime/egress.hpp"
#include "maf_sandbox/runtime/unique_fd.hpp"

namespace maf_sandbox::runtime {

// One line of the log, without the newline:
// {"time":"2026-11-29T12:00:00.123Z","method":"GET","host":"example.com","port":80,
//  "allowed":true,"reason":"..."}
std::string format_egress_decision(const EgressDecision& decision);

class EgressDecisionLog {
  public:
    // Opens (creating, mode 0600) `path` for appending. Throws SystemError.
    explicit EgressDecisionLog(const std::filesystem::path& path);

    // Appends one line in one write(2) on an O_APPEND descriptor, so concurrent writers never
    // interleave inside a line. Throws SystemError when the line cannot be written whole.
    void append(const EgressDecision& decision);

  private:
    std::filesystem::path path_;
    UniqueFd fd_;
};

}  // namespace maf_sandbox::runtime
