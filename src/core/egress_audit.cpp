#include "maf_sandbox/core/egress_audit.hpp"

#include <fmt/format.h>
#include <time.h>

#include <string_view>

#include "maf_sandbox/core/utf8.hpp"

namespace maf_sandbox {
namespace {

// Valid UTF-8 of at most `most` bytes, ending in "..." when it was cut (never inside a
// character): the entries come from guest requests, so nothing in them is trusted to be short.
std::string cut(std::string_view value, std::size_t most) {
    constexpr std::string_view kCut = "...";
    std::string text = replace_invalid_utf8(value);
    if (text.size() <= most) {
        return text;
    }
    std::size_t keep = most > kCut.size() ? most - kCut.size() : 0;
    while (keep > 0 && (static_cast<unsigned char>(text[keep]) & 0xC0) == 0x80) {
        --keep;
    }
    text.resize(keep);
    text += kCut.substr(0, most - keep);
    return text;
}

}  // namespace

EgressDecisionReport bound_egress_report(EgressDecisionReport report) {
    if (report.decisions.size() > kMaxEgressDecisions) {
        const auto extra = report.decisions.size() - kMaxEgressDecisions;
        report.omitted += extra;
        report.decisions.erase(report.decisions.begin(),
                               report.decisions.begin() + static_cast<std::ptrdiff_t>(extra));
    }
    for (auto& entry : report.decisions) {
        entry.host = cut(entry.host, kEgressEntryHostBytes);
        entry.method = cut(entry.method, kEgressEntryMethodBytes);
        entry.reason = cut(entry.reason, kEgressEntryReasonBytes);
        if (entry.path) {
            entry.path = cut(*entry.path, kEgressEntryPathBytes);
        }
    }
    return report;
}

std::string egress_time_text(std::chrono::system_clock::time_point time) {
    const auto ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(time.time_since_epoch()).count();
    const time_t seconds = static_cast<time_t>(ms / 1000);
    tm parts{};
    ::gmtime_r(&seconds, &parts);
    return fmt::format("{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z", parts.tm_year + 1900,
                       parts.tm_mon + 1, parts.tm_mday, parts.tm_hour, parts.tm_min, parts.tm_sec,
                       ms % 1000);
}

}  // namespace maf_sandbox
