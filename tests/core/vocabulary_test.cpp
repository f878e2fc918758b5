#include <gtest/gtest.h>

#include <set>

#include "maf_sandbox/core/errors.hpp"
#include "maf_sandbox/core/utf8.hpp"
#include "maf_sandbox/core/vocabulary.hpp"

namespace maf_sandbox {
namespace {

TEST(IsolationLadder, EveryMemberIsRankedWithDenseDistinctRanks) {
    std::set<int> ranks;
    for (auto rung : all_isolations()) {
        auto rank = rank_of(rung);
        ASSERT_TRUE(rank.has_value()) << to_string(rung);
        ranks.insert(*rank);
    }
    EXPECT_EQ(ranks.size(), all_isolations().size());
    EXPECT_EQ(*ranks.begin(), 0);
    EXPECT_EQ(*ranks.rbegin(), static_cast<int>(all_isolations().size()) - 1);
}

TEST(IsolationLadder, OrderRunsFromNoneToVm) {
    EXPECT_LT(rank_of(Isolation::none), rank_of(Isolation::runtime));
    EXPECT_LT(rank_of(Isolation::runtime), rank_of(Isolation::os_process));
    EXPECT_LT(rank_of(Isolation::os_process), rank_of(Isolation::container));
    EXPECT_LT(rank_of(Isolation::container), rank_of(Isolation::hardened_container));
    EXPECT_LT(rank_of(Isolation::hardened_container), rank_of(Isolation::microvm));
    EXPECT_LT(rank_of(Isolation::microvm), rank_of(Isolation::vm));
}

TEST(IsolationLadder, TheOldProcessRungNameIsRefusedForever) {
    EXPECT_THROW(parse_isolation("process"), InvalidArgument);
    EXPECT_EQ(parse_isolation("os_process"), Isolation::os_process);
}

TEST(IsolationLadder, MeetsFloorComparesRanks) {
    EXPECT_TRUE(meets_floor(Isolation::microvm, Isolation::microvm));
    EXPECT_TRUE(meets_floor(Isolation::vm, Isolation::microvm));
    EXPECT_FALSE(meets_floor(Isolation::container, Isolation::microvm));
    EXPECT_TRUE(meets_floor(Isolation::none, Isolation::none));
    EXPECT_FALSE(meets_floor(static_cast<Isolation>(99), Isolation::none));
}

TEST(IsolationScopeLadder, EveryMemberIsRankedAndCallIsStronger) {
    for (auto scope : all_isolation_scopes()) {
        EXPECT_TRUE(rank_of(scope).has_value()) << to_string(scope);
    }
    EXPECT_LT(rank_of(IsolationScope::conversation), rank_of(IsolationScope::call));
    EXPECT_EQ(stronger(IsolationScope::call, IsolationScope::conversation), IsolationScope::call);
}

TEST(DisposalCodes, EveryCodeHasAPrecedence) {
    for (auto code : all_disposal_codes()) {
        EXPECT_TRUE(rank_of(code).has_value()) << to_string(code);
    }
}

TEST(Vocabulary, EveryEnumRoundTripsThroughItsTable) {
    for (auto rung : all_isolations()) {
        EXPECT_EQ(parse_isolation(to_string(rung)), rung);
    }
    for (auto capability : all_capabilities()) {
        EXPECT_EQ(parse_capability(to_string(capability)), capability);
    }
    EXPECT_EQ(parse_egress("allowlist"), Egress::allowlist);
    EXPECT_EQ(parse_os_family("windows"), OsFamily::windows);
    EXPECT_EQ(parse_entry_kind("symlink"), EntryKind::symlink);
    EXPECT_EQ(parse_output_disposition("consume"), OutputDisposition::consume);
    EXPECT_EQ(parse_isolation_scope("call"), IsolationScope::call);
}

TEST(Vocabulary, UnknownStringsAreRefusedNamingTheAcceptedValues) {
    EXPECT_THROW(parse_capability("network"), InvalidArgument);
    EXPECT_THROW(parse_egress("undefined"), InvalidArgument);
    EXPECT_THROW(parse_egress("Closed"), InvalidArgument);
    EXPECT_THROW(parse_os_family(""), InvalidArgument);
    EXPECT_THROW(parse_isolation_scope("thread"), InvalidArgument);
    try {
        parse_egress("open");
        FAIL();
    } catch (const InvalidArgument& e) {
        EXPECT_NE(std::string(e.what()).find("unrestricted, allowlist, closed"), std::string::npos);
    }
}

}  // namespace
}  // namespace maf_sandbox

namespace maf_sandbox {
namespace {

TEST(BoundedUtf8, QuotesShortValidTextUnchanged) {
    EXPECT_EQ(bounded_utf8("héllo", 64), "héllo");
}

TEST(BoundedUtf8, CutsOnACodePointBoundaryAndSaysSo) {
    // "é" is two bytes: a cut after 2 bytes of "aé" would split it, so it falls back to "a".
    EXPECT_EQ(bounded_utf8("aéz", 2), "a (truncated)");
    EXPECT_TRUE(is_valid_utf8(bounded_utf8(std::string(100, 'x') + "€€€", 101)));
}

TEST(BoundedUtf8, ReplacesInvalidBytesBeforeCutting) {
    EXPECT_EQ(bounded_utf8("a\xff", 64), "a\xEF\xBF\xBD");
}

TEST(VocabularyRefusal, AHugeOrInvalidRefusedValueIsQuotedBoundedAndValidUtf8) {
    try {
        parse_egress(std::string(1 << 20, 'x') + "\xff");
        FAIL() << "an unknown egress mode was accepted";
    } catch (const InvalidArgument& e) {
        const std::string message = e.what();
        EXPECT_LT(message.size(), 400u);
        EXPECT_TRUE(is_valid_utf8(message));
        EXPECT_NE(message.find("(truncated)"), std::string::npos);
    }
}

}  // namespace
}  // namespace maf_sandbox
