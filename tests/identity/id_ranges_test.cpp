// The host id pool and the /etc/subuid, /etc/subgid parser (id_ranges.hpp).
#include "maf_sandbox/runtime/wire/id_ranges.hpp"

#include <gtest/gtest.h>

#include "maf_sandbox/core/errors.hpp"

namespace maf_sandbox::runtime {
namespace {

TEST(SubordinateIds, ReadsOwnerFirstAndCountOfEachLine) {
    const auto entries = parse_subordinate_ids("alice:100000:65536\n1001:165536:65536\n");
    ASSERT_EQ(entries.size(), 2u);
    EXPECT_EQ(entries[0].owner, "alice");
    EXPECT_EQ(entries[0].range, (IdRange{100000, 65536}));
    EXPECT_EQ(entries[1].owner, "1001");
    EXPECT_EQ(entries[1].range, (IdRange{165536, 65536}));
}

TEST(SubordinateIds, SkipsCommentsBlankLinesAndSurroundingSpace) {
    const auto entries =
        parse_subordinate_ids("# users\n\n  bob : 200000 : 1000 \r\n\t\n#carol:1:2\n");
    ASSERT_EQ(entries.size(), 1u);
    EXPECT_EQ(entries[0].owner, "bob");
    EXPECT_EQ(entries[0].range, (IdRange{200000, 1000}));
}

TEST(SubordinateIds, AMalformedLineGrantsNothing) {
    const auto entries = parse_subordinate_ids(
        "nofields\n"
        "a:1\n"
        "b:1:2:3\n"
        ":100000:10\n"
        "c:-5:10\n"
        "d:100000:0\n"
        "e:0x100:10\n"
        "f:4294967290:10\n"  // runs past (uid_t)-1
        "g:99999999999:1\n"  // not a 32-bit id
        "h:12a:5\n"
        "ok:300000:5\n");
    ASSERT_EQ(entries.size(), 1u);
    EXPECT_EQ(entries[0].owner, "ok");
}

TEST(SubordinateIds, ARangeEndingJustBelowTheNoIdValueIsAccepted) {
    const auto entries = parse_subordinate_ids("u:4294967285:10\n");
    ASSERT_EQ(entries.size(), 1u);
    EXPECT_EQ(entries[0].range.end(), 4294967295u);
}

TEST(IdPool, TheDefaultPoolIsDocumentedAndFarFromHostIds) {
    const auto pool = IdPool::parse(kDefaultIdPoolText);
    ASSERT_EQ(pool.ranges().size(), 1u);
    EXPECT_EQ(pool.ranges()[0], (IdRange{0x70000000u, 0x10000000u}));
    // Entirely past systemd-nspawn's range and below 2^31.
    EXPECT_GT(pool.ranges()[0].first, 0x6FFFFFFFu);
    EXPECT_LE(pool.ranges()[0].end(), 0x80000000u);
    EXPECT_EQ(pool.guest_count(kFullGuestIdCount), kFullGuestIdCount);
    EXPECT_EQ(pool.slot_count(kFullGuestIdCount), 0x10000000u / (65536 + kServiceIdCount));
}

TEST(IdPool, SlotsAreDisjointAndEachHoldsItsServiceIds) {
    const auto pool = IdPool::parse("0x70000000:200000,0x71000000:140000");
    const std::uint32_t count = 65536;
    const std::uint32_t span = count + kServiceIdCount;
    ASSERT_EQ(pool.slot_count(count), 3u + 2u);
    std::vector<IdMapping> slots;
    for (std::size_t i = 0; i < pool.slot_count(count); ++i) {
        const auto slot = pool.slot(i, count);
        ASSERT_TRUE(slot);
        EXPECT_EQ(slot->count, count);
        EXPECT_EQ(slot->proxy_id(), slot->host_base + count);
        EXPECT_EQ(slot->slirp_id(), slot->host_base + count + 1);
        EXPECT_EQ(slot->span(), span);
        for (const auto& other : slots) {
            EXPECT_TRUE(slot->host_base >= other.host_base + span ||
                        other.host_base >= slot->host_base + span);
        }
        slots.push_back(*slot);
    }
    EXPECT_EQ(slots[0].host_base, 0x70000000u);
    EXPECT_EQ(slots[1].host_base, 0x70000000u + span);
    EXPECT_EQ(slots[3].host_base, 0x71000000u);
    EXPECT_FALSE(pool.slot(pool.slot_count(count), count));
}

TEST(IdPool, RefusesRangesThatReachHostIdsOverlapOrHoldTheNoIdValue) {
    EXPECT_THROW(IdPool::parse("1000:65536"), InvalidArgument);
    EXPECT_THROW(IdPool::parse("0x70000000:100000,0x70010000:100000"), InvalidArgument);
    EXPECT_THROW(IdPool::parse("4294967200:200"), InvalidArgument);
    EXPECT_THROW(IdPool::parse(""), InvalidArgument);
    EXPECT_THROW(IdPool::parse("0x70000000"), InvalidArgument);
    EXPECT_THROW(IdPool::parse("0x70000000:0"), InvalidArgument);
    EXPECT_THROW(IdPool::parse("0x70000000:10:5"), InvalidArgument);
    EXPECT_NO_THROW(IdPool::parse(" 0x70000000:65538 , 2000000000:65538 "));
}

TEST(IdPool, ASmallSubordinateRangeGivesFewerGuestIds) {
    const auto pool =
        IdPool::from_subordinate_ids("alice", 1000, "alice:100000:65536\n", "alice:100000:65536\n");
    ASSERT_EQ(pool.ranges().size(), 1u);
    EXPECT_EQ(pool.guest_count(kFullGuestIdCount), 65536u - kServiceIdCount);
    EXPECT_EQ(pool.slot_count(pool.guest_count(kFullGuestIdCount)), 1u);
    const auto slot = pool.slot(0, pool.guest_count(kFullGuestIdCount));
    ASSERT_TRUE(slot);
    EXPECT_EQ(slot->host_base, 100000u);
    EXPECT_EQ(slot->slirp_id(), 100000u + 65535u);
}

TEST(IdPool, SubordinateIdsAreThosePresentInBothFilesForTheUserByNameOrUid) {
    const std::string subuid =
        "alice:100000:65536\n"
        "1000:300000:100000\n"
        "bob:500000:65536\n";
    const std::string subgid =
        "alice:120000:65536\n"  // overlaps alice's uids from 120000 to 165535
        "alice:300000:50000\n"  // inside the uid-keyed range
        "bob:500000:65536\n";
    const auto pool = IdPool::from_subordinate_ids("alice", 1000, subuid, subgid);
    ASSERT_EQ(pool.ranges().size(), 2u);
    EXPECT_EQ(pool.ranges()[0], (IdRange{120000, 45536}));
    EXPECT_EQ(pool.ranges()[1], (IdRange{300000, 50000}));
    EXPECT_THROW(IdPool::from_subordinate_ids("carol", 1002, subuid, subgid), InvalidArgument);
}

TEST(IdPool, ARangeWithNoRoomForAGuestAndItsServicesIsRefused) {
    const auto pool = IdPool::from_subordinate_ids("u", 5, "u:100000:2\n", "u:100000:2\n");
    EXPECT_THROW(pool.guest_count(kFullGuestIdCount), InvalidArgument);
}

}  // namespace
}  // namespace maf_sandbox::runtime
