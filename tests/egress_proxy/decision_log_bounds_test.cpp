// The egress decision log's bounds (issue 17, item 4), driven directly with a clock of the test's
// own: records past the rate are counted and reported by one "suppressed" line, the file never
// passes its size bound (a last "log_full" line says so), and long fields are cut.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <boost/json.hpp>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "egress_decision_log.hpp"
#include "maf_sandbox/runtime/egress/egress.hpp"

namespace maf_sandbox::runtime {
namespace {

namespace fs = std::filesystem;
using Clock = EgressDecisionLog::Clock;

class EgressDecisionLogBounds : public ::testing::Test {
  protected:
    void SetUp() override {
        std::string pattern = (fs::temp_directory_path() / "maf-log-bounds-XXXXXX").string();
        ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
        dir_ = pattern;
    }
    void TearDown() override {
        std::error_code ignored;
        fs::remove_all(dir_, ignored);
    }
    fs::path log() const { return dir_ / "egress.log"; }
    std::vector<boost::json::object> lines() const {
        std::vector<boost::json::object> out;
        std::ifstream in(log());
        for (std::string line; std::getline(in, line);) {
            out.push_back(boost::json::parse(line).as_object());
        }
        return out;
    }
    static EgressDecision refusal(std::string host = "denied.test") {
        EgressDecision decision;
        decision.time = std::chrono::system_clock::now();
        decision.method = "GET";
        decision.host = std::move(host);
        decision.port = 80;
        decision.reason = "host not in allowlist";
        return decision;
    }
    fs::path dir_;
};

TEST_F(EgressDecisionLogBounds, RecordsWithinTheRateAreAllWritten) {
    EgressLogLimits limits;
    limits.records_per_second = 5;
    EgressDecisionLog log(this->log(), limits);
    const auto start = Clock::now();
    for (int i = 0; i < 5; ++i) {
        log.append(refusal(), start);
    }
    EXPECT_EQ(read_egress_decisions(this->log()).size(), 5u);
    EXPECT_EQ(log.pending_suppressed(), 0u);
}

TEST_F(EgressDecisionLogBounds, RecordsPastTheRateAreCountedAndReportedOnce) {
    EgressLogLimits limits;
    limits.records_per_second = 5;
    EgressDecisionLog log(this->log(), limits);
    const auto start = Clock::now();
    for (int i = 0; i < 1000; ++i) {
        log.append(refusal(), start + std::chrono::milliseconds(i % 900));
    }
    EXPECT_EQ(read_egress_decisions(this->log()).size(), 5u);
    EXPECT_EQ(log.pending_suppressed(), 995u);
    // The next second's first record reports the count before it is written.
    log.append(refusal(), start + std::chrono::milliseconds(1000));
    const auto written = lines();
    ASSERT_EQ(written.size(), 7u);
    EXPECT_EQ(written[5].at("suppressed").to_number<std::uint64_t>(), 995u);
    EXPECT_EQ(read_egress_decisions(this->log()).size(), 6u);  // the count is no decision
    // Or flush_suppressed, when no record follows.
    for (int i = 0; i < 10; ++i) {
        log.append(refusal(), start + std::chrono::milliseconds(1001));
    }
    log.flush_suppressed();
    EXPECT_EQ(lines().back().at("suppressed").to_number<std::uint64_t>(), 6u);
}

TEST_F(EgressDecisionLogBounds, TheFileNeverPassesItsSizeBound) {
    EgressLogLimits limits;
    limits.records_per_second = 1000000;
    limits.max_bytes = 8192;
    EgressDecisionLog log(this->log(), limits);
    const auto start = Clock::now();
    for (int i = 0; i < 10000; ++i) {
        log.append(refusal(), start);
    }
    EXPECT_LE(fs::file_size(this->log()), 8192u);
    EXPECT_GT(fs::file_size(this->log()), 8192u - 512u);  // filled, not stopped early
    EXPECT_TRUE(lines().back().at("log_full").as_bool());
    // A new writer (a restarted proxy) on the full file writes nothing more.
    EgressDecisionLog again(this->log(), limits);
    again.append(refusal(), start);
    EXPECT_LE(fs::file_size(this->log()), 8192u);
}

TEST_F(EgressDecisionLogBounds, LongFieldsAreCutAtCharacterBoundaries) {
    EXPECT_EQ(truncate_log_field("short", 16), "short");
    EXPECT_EQ(truncate_log_field(std::string(20, 'a'), 16), std::string(13, 'a') + "...");
    // "é" is two bytes: the cut never leaves half of it.
    const std::string accented = std::string(12, 'a') + "\xc3\xa9\xc3\xa9\xc3\xa9";
    const auto cut = truncate_log_field(accented, 16);
    EXPECT_LE(cut.size(), 16u);
    EXPECT_EQ(cut, std::string(12, 'a') + "...");

    EgressDecisionLog log(this->log(), EgressLogLimits{});
    auto decision = refusal(std::string(5000, 'h'));
    decision.method = std::string(100, 'M');
    decision.reason = std::string(5000, 'r');
    log.append(decision);
    const auto read = read_egress_decisions(this->log());
    ASSERT_EQ(read.size(), 1u);
    EXPECT_EQ(read[0].host.size(), kEgressLogHostBytes);
    EXPECT_EQ(read[0].method.size(), kEgressLogMethodBytes);
    EXPECT_EQ(read[0].reason.size(), kEgressLogReasonBytes);
}

TEST(EgressLogBudget, IsTheSmallerOfTheLimitAndADiskShareWithAFloor) {
    EXPECT_EQ(egress_log_budget(4ull << 20, 2ull << 30), 4ull << 20);
    EXPECT_EQ(egress_log_budget(4ull << 20, 64ull << 20), 1ull << 20);
    EXPECT_EQ(egress_log_budget(4ull << 20, 1ull << 20), 64ull << 10);
}

TEST(EgressLogLimitsJson, RoundTripsAndOldRecordsGetTheDefaults) {
    EgressOperatorOptions options;
    options.decision_log.max_bytes = 12345;
    options.decision_log.records_per_second = 7;
    const auto back = EgressOperatorOptions::from_json(options.to_json());
    EXPECT_EQ(back.decision_log, options.decision_log);
    const auto old = EgressOperatorOptions::from_json(
        boost::json::parse(R"({"hosts_file":null,"allow_private":false})"));
    EXPECT_EQ(old.decision_log, EgressLogLimits{});
}

}  // namespace
}  // namespace maf_sandbox::runtime
