// The host ids sandboxes are given: a pool of host uid/gid ranges cut into slots, one slot per live
// sandbox. A slot holds the sandbox's guest ids (mapped into its user namespace) and the ids of its
// own services (IdMapping::proxy_id, slirp_id), so no two sandboxes ever share a host id.
//
// As root the pool is a documented range far from every id the host uses (kDefaultIdPoolText);
// a rootless runtime would take the invoking user's subordinate ranges from /etc/subuid and
// /etc/subgid (IdPool::from_subordinate_ids) and allocate from them the same way.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "maf_sandbox/runtime/kernel/namespaces.hpp"

namespace maf_sandbox::runtime {

// Host ids [first, first + count). count > 0 and the range ends at or below 2^32 - 1 (the kernel's
// "no id", (uid_t)-1, is never inside).
struct IdRange {
    std::uint32_t first = 0;
    std::uint32_t count = 0;
    std::uint64_t end() const noexcept { return std::uint64_t{first} + count; }
    bool operator==(const IdRange&) const = default;
};

// The root pool: 0x70000000 (1879048192) onwards, 0x10000000 ids, 4095 slots of a full 65536-id
// guest. It lies above systemd-nspawn's container range (0x00080000-0x6FFFFFFF), far above the
// usual /etc/subuid allocations (100000 onwards) and the host's own accounts, and below 2^31,
// which tools that read ids as signed 32-bit numbers get wrong. No host account may use it.
inline constexpr const char* kDefaultIdPoolText = "0x70000000:0x10000000";
// Overrides the pool: "first:count[,first:count...]", decimal or 0x-hex.
inline constexpr const char* kIdPoolEnv = "MAF_SANDBOX_ID_POOL";

// The guest id count a sandbox asks for: guest ids 0-65535, as every distribution's images expect.
inline constexpr std::uint32_t kFullGuestIdCount = 65536;

// One line of /etc/subuid or /etc/subgid: "owner:first:count", owner a user name or a uid.
struct SubordinateRange {
    std::string owner;
    IdRange range;
};

// Every well-formed line of a subuid/subgid file. Empty lines and lines starting with '#' are
// skipped, as are malformed ones (a missing field, a number that is not decimal, a zero count, a
// range past 2^32 - 1): a line that cannot be read grants nothing. Never throws.
std::vector<SubordinateRange> parse_subordinate_ids(std::string_view text);

// A set of disjoint host id ranges, sorted by first id, cut into equal slots.
class IdPool {
  public:
    // Throws InvalidArgument naming the range when one is empty, holds (uid_t)-1, reaches into
    // the host's own ids (below 65536 when `allow_low` is false) or overlaps another.
    explicit IdPool(std::vector<IdRange> ranges, bool allow_low = false);

    // kDefaultIdPoolText, or $MAF_SANDBOX_ID_POOL when set and non-empty.
    static IdPool from_environment();
    // "first:count[,first:count...]" with decimal or 0x-hex numbers. Throws InvalidArgument.
    static IdPool parse(std::string_view text);
    // The ranges `user` (a name) or `uid` owns in both files: the part of each subuid range that
    // is also one of its subgid ranges, because a sandbox's uids and gids share one mapping.
    // Subordinate ranges may lie anywhere (allow_low). Throws InvalidArgument when none is left.
    static IdPool from_subordinate_ids(std::string_view user, uid_t uid, std::string_view subuid,
                                       std::string_view subgid);

    const std::vector<IdRange>& ranges() const noexcept { return ranges_; }

    // The largest guest id count not above `wanted` for which at least one slot exists: `wanted`
    // unless every range is smaller than wanted + kServiceIdCount. Throws InvalidArgument when no
    // range has room for one guest id and the services.
    std::uint32_t guest_count(std::uint32_t wanted) const;
    // How many slots of `guest_count` guest ids the pool holds (each slot spans guest_count +
    // kServiceIdCount ids; a range's remainder smaller than that is unused).
    std::size_t slot_count(std::uint32_t guest_count) const noexcept;
    // The host ids of slot `index`; nullopt when index >= slot_count(guest_count).
    std::optional<IdMapping> slot(std::size_t index, std::uint32_t guest_count) const noexcept;

  private:
    std::vector<IdRange> ranges_;
};

}  // namespace maf_sandbox::runtime
