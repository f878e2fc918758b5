// The pool of host ids and the subordinate-id files a rootless pool would come from. Pure
// computation: nothing here touches the system, so every function is unit-tested and fuzzed
// (fuzz/id_ranges_fuzz.cpp).
#include "maf_sandbox/runtime/wire/id_ranges.hpp"

#include <algorithm>
#include <cstdlib>
#include <limits>

#include <fmt/format.h>

#include "maf_sandbox/core/errors.hpp"

namespace maf_sandbox::runtime {

namespace {

// One past the last id a range may hold: (uid_t)-1 means "no id" to the kernel.
constexpr std::uint64_t kIdLimit = std::numeric_limits<std::uint32_t>::max();
// Ids below this are the host's own accounts (and every image's), never a sandbox's host ids.
constexpr std::uint64_t kHostOwnIds = 65536;

std::string_view trim(std::string_view text) {
    while (!text.empty() && (text.front() == ' ' || text.front() == '\t' || text.front() == '\r')) {
        text.remove_prefix(1);
    }
    while (!text.empty() && (text.back() == ' ' || text.back() == '\t' || text.back() == '\r')) {
        text.remove_suffix(1);
    }
    return text;
}

// A decimal (or, with `hex_ok`, 0x-prefixed hexadecimal) number below 2^32; nullopt otherwise.
std::optional<std::uint64_t> parse_number(std::string_view text, bool hex_ok) {
    int base = 10;
    if (hex_ok && text.size() > 2 && text[0] == '0' && (text[1] == 'x' || text[1] == 'X')) {
        base = 16;
        text.remove_prefix(2);
    }
    if (text.empty() || text.size() > 10) {
        return std::nullopt;
    }
    std::uint64_t value = 0;
    for (const char c : text) {
        int digit = -1;
        if (c >= '0' && c <= '9') {
            digit = c - '0';
        } else if (base == 16 && c >= 'a' && c <= 'f') {
            digit = c - 'a' + 10;
        } else if (base == 16 && c >= 'A' && c <= 'F') {
            digit = c - 'A' + 10;
        }
        if (digit < 0) {
            return std::nullopt;
        }
        value = value * static_cast<std::uint64_t>(base) + static_cast<std::uint64_t>(digit);
    }
    if (value > std::numeric_limits<std::uint32_t>::max()) {
        return std::nullopt;
    }
    return value;
}

// "first:count" as a range that ends at or below kIdLimit; nullopt when it does not.
std::optional<IdRange> parse_range(std::string_view first_text, std::string_view count_text,
                                   bool hex_ok) {
    const auto first = parse_number(trim(first_text), hex_ok);
    const auto count = parse_number(trim(count_text), hex_ok);
    if (!first || !count || *count == 0 || *first + *count > kIdLimit) {
        return std::nullopt;
    }
    return IdRange{static_cast<std::uint32_t>(*first), static_cast<std::uint32_t>(*count)};
}

std::vector<std::string_view> split(std::string_view text, char separator) {
    std::vector<std::string_view> parts;
    std::size_t start = 0;
    for (;;) {
        const auto at = text.find(separator, start);
        parts.push_back(text.substr(start, at == std::string_view::npos ? at : at - start));
        if (at == std::string_view::npos) {
            return parts;
        }
        start = at + 1;
    }
}

std::string describe(const IdRange& range) {
    return fmt::format("{}:{}", range.first, range.count);
}

}  // namespace

std::vector<SubordinateRange> parse_subordinate_ids(std::string_view text) {
    std::vector<SubordinateRange> entries;
    for (const auto raw : split(text, '\n')) {
        const auto line = trim(raw);
        if (line.empty() || line.front() == '#') {
            continue;
        }
        const auto fields = split(line, ':');
        if (fields.size() != 3) {
            continue;
        }
        const auto owner = trim(fields[0]);
        const auto range = parse_range(fields[1], fields[2], false);
        if (owner.empty() || !range) {
            continue;
        }
        entries.push_back({std::string(owner), *range});
    }
    return entries;
}

IdPool::IdPool(std::vector<IdRange> ranges, bool allow_low) : ranges_(std::move(ranges)) {
    if (ranges_.empty()) {
        throw InvalidArgument("the host id pool is empty; give at least one first:count range");
    }
    std::sort(ranges_.begin(), ranges_.end(),
              [](const IdRange& a, const IdRange& b) { return a.first < b.first; });
    for (std::size_t i = 0; i < ranges_.size(); ++i) {
        const auto& range = ranges_[i];
        if (range.count == 0 || range.end() > kIdLimit) {
            throw InvalidArgument(fmt::format(
                "host id range {} is empty or reaches 4294967295, which means \"no id\"",
                describe(range)));
        }
        if (!allow_low && range.first < kHostOwnIds) {
            throw InvalidArgument(fmt::format(
                "host id range {} reaches below 65536, into the host's own accounts; give a range "
                "that no host account uses (the default is {})",
                describe(range), kDefaultIdPoolText));
        }
        if (i > 0 && ranges_[i - 1].end() > range.first) {
            throw InvalidArgument(fmt::format("host id ranges {} and {} overlap",
                                              describe(ranges_[i - 1]), describe(range)));
        }
    }
}

IdPool IdPool::from_environment() {
    if (const char* text = std::getenv(kIdPoolEnv); text != nullptr && *text != '\0') {
        try {
            return parse(text);
        } catch (const InvalidArgument& e) {
            throw InvalidArgument(fmt::format("{}: {}", kIdPoolEnv, e.what()));
        }
    }
    return parse(kDefaultIdPoolText);
}

IdPool IdPool::parse(std::string_view text) {
    std::vector<IdRange> ranges;
    for (const auto item : split(text, ',')) {
        const auto fields = split(trim(item), ':');
        const auto range =
            fields.size() == 2 ? parse_range(fields[0], fields[1], true) : std::nullopt;
        if (!range) {
            throw InvalidArgument(
                fmt::format("'{}' is not a host id range; write first:count (decimal or 0x-hex, "
                            "ending below 4294967295), several separated by commas",
                            trim(item)));
        }
        ranges.push_back(*range);
    }
    return IdPool(std::move(ranges));
}

IdPool IdPool::from_subordinate_ids(std::string_view user, uid_t uid, std::string_view subuid,
                                    std::string_view subgid) {
    const auto owned = [&](std::string_view text) {
        std::vector<IdRange> ranges;
        const auto uid_text = std::to_string(uid);
        for (const auto& entry : parse_subordinate_ids(text)) {
            if (entry.owner == user || entry.owner == uid_text) {
                ranges.push_back(entry.range);
            }
        }
        return ranges;
    };
    const auto uids = owned(subuid);
    const auto gids = owned(subgid);
    // Both lists may overlap themselves (the files allow it): intersect pairwise, then merge.
    std::vector<IdRange> both;
    for (const auto& u : uids) {
        for (const auto& g : gids) {
            const std::uint64_t first = std::max(u.first, g.first);
            const std::uint64_t end = std::min(u.end(), g.end());
            if (first < end) {
                both.push_back(
                    {static_cast<std::uint32_t>(first), static_cast<std::uint32_t>(end - first)});
            }
        }
    }
    std::sort(both.begin(), both.end(),
              [](const IdRange& a, const IdRange& b) { return a.first < b.first; });
    std::vector<IdRange> merged;
    for (const auto& range : both) {
        if (!merged.empty() && merged.back().end() >= range.first) {
            const auto end = std::max(merged.back().end(), range.end());
            merged.back().count = static_cast<std::uint32_t>(end - merged.back().first);
        } else {
            merged.push_back(range);
        }
    }
    if (merged.empty()) {
        throw InvalidArgument(fmt::format(
            "user {} (uid {}) has no subordinate ids that are both in /etc/subuid and in "
            "/etc/subgid; add a line {}:<first>:<count> to both (usermod --add-subuids and "
            "--add-subgids)",
            user, uid, user));
    }
    return IdPool(std::move(merged), /*allow_low=*/true);
}

std::uint32_t IdPool::guest_count(std::uint32_t wanted) const {
    std::uint64_t largest = 0;
    for (const auto& range : ranges_) {
        largest = std::max<std::uint64_t>(largest, range.count);
    }
    if (largest <= kServiceIdCount) {
        throw InvalidArgument(fmt::format(
            "no host id range of the pool has room for a guest id and the sandbox's {} service ids",
            kServiceIdCount));
    }
    return static_cast<std::uint32_t>(std::min<std::uint64_t>(wanted, largest - kServiceIdCount));
}

std::size_t IdPool::slot_count(std::uint32_t guest_count) const noexcept {
    const std::uint64_t span = std::uint64_t{guest_count} + kServiceIdCount;
    std::size_t slots = 0;
    for (const auto& range : ranges_) {
        slots += static_cast<std::size_t>(range.count / span);
    }
    return slots;
}

std::optional<IdMapping> IdPool::slot(std::size_t index, std::uint32_t guest_count) const noexcept {
    const std::uint64_t span = std::uint64_t{guest_count} + kServiceIdCount;
    if (guest_count == 0) {
        return std::nullopt;
    }
    for (const auto& range : ranges_) {
        const std::size_t here = static_cast<std::size_t>(range.count / span);
        if (index < here) {
            IdMapping mapping;
            mapping.host_base = static_cast<uid_t>(range.first + index * span);
            mapping.count = guest_count;
            return mapping;
        }
        index -= here;
    }
    return std::nullopt;
}

}  // namespace maf_sandbox::runtime
