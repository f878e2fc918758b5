// Egress audit and live egress changes (issue 23): what a sandbox's egress enforcement decided,
// and a new egress policy for a running sandbox. Capabilities `egress_audit` and `egress_update`.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "maf_sandbox/core/vocabulary.hpp"

namespace maf_sandbox {

// One decision of the sandbox's egress enforcement about one guest connection or request.
struct EgressDecisionEntry {
    std::chrono::system_clock::time_point time;
    std::string host;    // as the guest named it (cut to kEgressEntryHostBytes)
    std::string method;  // "GET", "CONNECT", ... (cut to kEgressEntryMethodBytes)
    // The request path, without its query, where the enforcement saw one (plain HTTP); unset for
    // a TLS tunnel, whose path is encrypted. Cut to kEgressEntryPathBytes.
    std::optional<std::string> path;
    std::uint16_t port = 0;  // 0 when the backend does not report it
    bool allowed = false;
    std::string reason;  // why (cut to kEgressEntryReasonBytes)
};

// What egress_decisions answers: the newest decisions, oldest first, at most kMaxEgressDecisions.
struct EgressDecisionReport {
    std::vector<EgressDecisionEntry> decisions;
    // Decisions left out of `decisions` because the answer is bounded (the oldest go first).
    std::uint64_t omitted = 0;
    // Decisions the sandbox's log did not record (past its rate bound, or once it was full); they
    // were made all the same.
    std::uint64_t unrecorded = 0;
    bool log_full = false;  // the log reached its size bound and records nothing more
};

inline constexpr std::size_t kMaxEgressDecisions = 1000;
inline constexpr std::size_t kEgressEntryHostBytes = 256;
inline constexpr std::size_t kEgressEntryMethodBytes = 16;
inline constexpr std::size_t kEgressEntryPathBytes = 256;
inline constexpr std::size_t kEgressEntryReasonBytes = 160;

// An egress policy for set_egress_policy: the spec's two fields, with the spec's meaning.
struct EgressPolicyRequest {
    Egress mode = Egress::closed;
    std::vector<std::string> allow;  // egress_allow entries (allowlist only)
};

// Cuts every field of `report`'s entries to the bounds above and keeps only the newest
// kMaxEgressDecisions entries (counting the rest in `omitted`). Backends pass what they read
// from elsewhere (a file, the service) through it before answering.
EgressDecisionReport bound_egress_report(EgressDecisionReport report);

// The RFC 3339 UTC form with milliseconds ("2026-11-29T12:00:00.123Z") used by every front end.
std::string egress_time_text(std::chrono::system_clock::time_point time);

}  // namespace maf_sandbox
