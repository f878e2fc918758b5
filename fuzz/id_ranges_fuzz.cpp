// The host id pool and the /etc/subuid, /etc/subgid parser (runtime/wire/id_ranges.hpp) on
// arbitrary bytes: the input is split into a pool text, a subuid text and a subgid text.
//
// Properties, beyond not crashing:
// - parse_subordinate_ids never throws, and every entry it returns has a non-empty owner and a
//   non-empty range that ends at or below 2^32 - 1 (never holding (uid_t)-1);
// - IdPool::parse either refuses with InvalidArgument or returns sorted, disjoint, non-empty
//   ranges, none reaching below 65536 or past 2^32 - 1;
// - IdPool::from_subordinate_ids either refuses with InvalidArgument or returns ranges each of
//   which lies inside one of the user's subuid ranges and inside one of its subgid ranges;
// - every slot of a pool lies inside one of its ranges, and no two slots overlap.
#include <fuzzer/FuzzedDataProvider.h>

#include <cstdint>
#include <string>
#include <vector>

#include "fuzz_check.hpp"
#include "maf_sandbox/core/errors.hpp"
#include "maf_sandbox/runtime/wire/id_ranges.hpp"

namespace maf_sandbox {
namespace {

using fuzz::require;
using runtime::IdPool;
using runtime::IdRange;

bool inside_one_of(const IdRange& range, const std::vector<IdRange>& of) {
    for (const auto& outer : of) {
        if (range.first >= outer.first && range.end() <= outer.end()) {
            return true;
        }
    }
    return false;
}

void check_pool(const IdPool& pool, bool low_allowed) {
    const auto& ranges = pool.ranges();
    require(!ranges.empty(), "a pool has a range");
    for (std::size_t i = 0; i < ranges.size(); ++i) {
        require(ranges[i].count > 0, "no range is empty");
        require(ranges[i].end() <= 0xFFFFFFFFull, "no range holds (uid_t)-1");
        require(low_allowed || ranges[i].first >= 65536, "no range reaches host ids");
        require(i == 0 || ranges[i - 1].end() <= ranges[i].first, "ranges are sorted, disjoint");
    }
    std::uint32_t count = 0;
    try {
        count = pool.guest_count(runtime::kFullGuestIdCount);
    } catch (const InvalidArgument&) {
        return;
    }
    require(count > 0 && count <= runtime::kFullGuestIdCount, "guest count within what was asked");
    const std::size_t slots = std::min<std::size_t>(pool.slot_count(count), 64);
    require(pool.slot_count(count) > 0, "a guest count is one a slot fits");
    std::uint64_t previous_end = 0;
    for (std::size_t i = 0; i < slots; ++i) {
        const auto slot = pool.slot(i, count);
        require(slot.has_value(), "every counted slot exists");
        const IdRange span{slot->host_base, slot->span()};
        require(inside_one_of(span, ranges), "a slot lies inside a range");
        require(span.first >= previous_end, "slots do not overlap");
        previous_end = span.end();
    }
    require(!pool.slot(pool.slot_count(count), count), "no slot past the last");
}

}  // namespace
}  // namespace maf_sandbox

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    using namespace maf_sandbox;
    FuzzedDataProvider input(data, size);
    const auto pool_text = input.ConsumeRandomLengthString(256);
    const auto subuid = input.ConsumeRandomLengthString(2048);
    const auto subgid = input.ConsumeRemainingBytesAsString();

    for (const auto* text : {&subuid, &subgid}) {
        for (const auto& entry : runtime::parse_subordinate_ids(*text)) {
            fuzz::require(!entry.owner.empty(), "an entry has an owner");
            fuzz::require(entry.range.count > 0, "an entry's range is not empty");
            fuzz::require(entry.range.end() <= 0xFFFFFFFFull, "an entry never holds (uid_t)-1");
        }
    }
    try {
        check_pool(IdPool::parse(pool_text), false);
    } catch (const InvalidArgument&) {
    }
    // The owner is the first entry's, so most inputs exercise the intersection.
    const auto entries = runtime::parse_subordinate_ids(subuid);
    const std::string user = entries.empty() ? "user" : entries.front().owner;
    try {
        const auto pool = IdPool::from_subordinate_ids(user, 1000, subuid, subgid);
        std::vector<IdRange> uids;
        std::vector<IdRange> gids;
        for (const auto& e : entries) {
            if (e.owner == user || e.owner == "1000") {
                uids.push_back(e.range);
            }
        }
        for (const auto& e : runtime::parse_subordinate_ids(subgid)) {
            if (e.owner == user || e.owner == "1000") {
                gids.push_back(e.range);
            }
        }
        for (const auto& range : pool.ranges()) {
            // Merged ranges may span several adjacent entries: check id by id at the ends.
            for (const std::uint64_t id : {std::uint64_t{range.first}, range.end() - 1}) {
                const IdRange one{static_cast<std::uint32_t>(id), 1};
                fuzz::require(inside_one_of(one, uids), "a subordinate pool id is the user's uid");
                fuzz::require(inside_one_of(one, gids), "a subordinate pool id is the user's gid");
            }
        }
        check_pool(pool, true);
    } catch (const InvalidArgument&) {
    }
    return 0;
}
