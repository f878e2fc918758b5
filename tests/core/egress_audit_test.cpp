#include "maf_sandbox/core/egress_audit.hpp"

#include <gtest/gtest.h>

namespace maf_sandbox {
namespace {

TEST(EgressAudit, ReportKeepsOnlyTheNewestDecisionsAndCountsTheRest) {
    EgressDecisionReport report;
    for (std::size_t i = 0; i < kMaxEgressDecisions + 5; ++i) {
        EgressDecisionEntry entry;
        entry.host = "h" + std::to_string(i) + ".test";
        report.decisions.push_back(entry);
    }
    const auto bounded = bound_egress_report(report);
    ASSERT_EQ(bounded.decisions.size(), kMaxEgressDecisions);
    EXPECT_EQ(bounded.omitted, 5u);
    EXPECT_EQ(bounded.decisions.front().host, "h5.test");
}

TEST(EgressAudit, LongFieldsAreCutOnACharacterBoundaryAndMarked) {
    EgressDecisionReport report;
    EgressDecisionEntry entry;
    entry.host = std::string(kEgressEntryHostBytes - 4, 'a') + "\xc3\xa9\xc3\xa9\xc3\xa9";
    entry.path = std::string(1000, '/');
    entry.method = std::string(100, 'G');
    entry.reason = "\xff";  // not UTF-8: replaced
    report.decisions.push_back(entry);
    const auto cut = bound_egress_report(report).decisions.front();
    EXPECT_LE(cut.host.size(), kEgressEntryHostBytes);
    EXPECT_EQ(cut.host.substr(cut.host.size() - 3), "...");
    EXPECT_EQ(cut.path->size(), kEgressEntryPathBytes);
    EXPECT_EQ(cut.method.size(), kEgressEntryMethodBytes);
    EXPECT_EQ(cut.reason, "\xef\xbf\xbd");
}

TEST(EgressAudit, TimesAreRfc3339UtcWithMilliseconds) {
    const auto time =
        std::chrono::system_clock::time_point(std::chrono::milliseconds(1'700'000'000'123));
    EXPECT_EQ(egress_time_text(time), "2023-11-14T22:13:20.123Z");
}

}  // namespace
}  // namespace maf_sandbox
