// The rule every replica uses to pick one sandbox when racing creates left several for a key
// (issue 27): the oldest createdAt, then the lowest id, however the service spells the instant.
#include <gtest/gtest.h>

#include "convergence.hpp"

namespace maf_sandbox::acas {
namespace {

SandboxInfo holder(std::string id, std::string created_at) {
    SandboxInfo info;
    info.id = std::move(id);
    info.created_at = std::move(created_at);
    return info;
}

TEST(AcasConvergence, ParsesTheServicesSevenDigitFractionAndTheEmulatorsSixDigitOne) {
    const auto service = convergence::parse_created_at("2026-10-04T01:50:55.1020312+00:00");
    const auto emulator = convergence::parse_created_at("2026-10-04T01:50:55.102031+00:00");
    ASSERT_TRUE(service && emulator);
    EXPECT_EQ(*service - *emulator, 200);  // 0.1020312 s against 0.102031 s, in nanoseconds
    EXPECT_EQ(*convergence::parse_created_at("1970-01-01T00:00:01Z"), 1'000'000'000);
}

TEST(AcasConvergence, ComparesInstantsAcrossZoneOffsetsNotTheirSpelling) {
    // 02:00+02:00 is 00:00 UTC, earlier than 01:00Z although its text sorts later.
    const auto a = holder("b", "2026-10-04T02:00:00+02:00");
    const auto b = holder("a", "2026-10-04T01:00:00Z");
    EXPECT_TRUE(convergence::wins_over(a, b));
    EXPECT_EQ(convergence::winner({b, a})->id, "b");
}

TEST(AcasConvergence, TheOldestWinsAndTheLowestIdBreaksATie) {
    const auto old = holder("zz", "2026-10-04T01:50:55.000001+00:00");
    const auto tie1 = holder("bb", "2026-10-04T01:50:55.000002+00:00");
    const auto tie2 = holder("aa", "2026-10-04T01:50:55.000002+00:00");
    EXPECT_EQ(convergence::winner({tie1, old, tie2})->id, "zz");
    EXPECT_EQ(convergence::winner({tie1, tie2})->id, "aa");
    // Every order of the same listing names the same winner.
    EXPECT_EQ(convergence::winner({tie2, tie1})->id, "aa");
}

TEST(AcasConvergence, AMissingOrMalformedCreatedAtLosesToAParsableOne) {
    const auto parsable = holder("zz", "2026-10-04T01:50:55Z");
    for (const char* bad : {"", "yesterday", "2026-10-04T01:50:55", "2026-13-04T01:50:55Z",
                            "2026-10-04T01:50:55.Z", "2026-10-04T01:50:55Zjunk"}) {
        EXPECT_FALSE(convergence::parse_created_at(bad).has_value()) << bad;
        EXPECT_EQ(convergence::winner({holder("aa", bad), parsable})->id, "zz") << bad;
    }
    // Two without one: the ids decide.
    EXPECT_EQ(convergence::winner({holder("b", ""), holder("a", "?")})->id, "a");
    EXPECT_FALSE(convergence::winner({}).has_value());
}

TEST(AcasConvergence, ADiscardedSandboxNeverWinsOverTheReplacementMadeForIt) {
    // The discarding process makes the replacement before it deletes the old sandbox: while both
    // are listed, the older one would win by age and a racing acquire would delete the new one.
    const auto doomed = holder("aa", "2026-10-04T01:50:55.000001+00:00");
    auto replacement = holder("zz", "2026-10-04T01:50:56.000001+00:00");
    replacement.labels["replaced-from"] = "aa";
    EXPECT_EQ(convergence::winner({doomed, replacement})->id, "zz");
    EXPECT_EQ(convergence::winner({replacement, doomed})->id, "zz");
    // A replacement competes by the ordinary rule with any sandbox it does not name.
    const auto other = holder("bb", "2026-10-04T01:50:55.500000+00:00");
    EXPECT_EQ(convergence::winner({doomed, replacement, other})->id, "bb");
}

}  // namespace
}  // namespace maf_sandbox::acas
