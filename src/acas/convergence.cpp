#include "convergence.hpp"

#include "replacement_notice.hpp"

namespace maf_sandbox::acas::convergence {

namespace {

// Reads exactly `width` digits at `at`; advances `at`.
std::optional<int> digits(std::string_view text, std::size_t& at, std::size_t width) {
    if (at + width > text.size())
        return std::nullopt;
    int value = 0;
    for (std::size_t i = 0; i < width; ++i) {
        const char c = text[at + i];
        if (c < '0' || c > '9')
            return std::nullopt;
        value = value * 10 + (c - '0');
    }
    at += width;
    return value;
}

bool expect(std::string_view text, std::size_t& at, char c) {
    if (at >= text.size() || text[at] != c)
        return false;
    ++at;
    return true;
}

// Days from 1970-01-01 to a proleptic Gregorian date (Howard Hinnant's days_from_civil).
std::int64_t days_from_civil(std::int64_t y, unsigned m, unsigned d) {
    y -= m <= 2 ? 1 : 0;
    const std::int64_t era = (y >= 0 ? y : y - 399) / 400;
    const auto yoe = static_cast<unsigned>(y - era * 400);
    const unsigned doy = (153 * (m > 2 ? m - 3 : m + 9) + 2) / 5 + d - 1;
    const unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + static_cast<std::int64_t>(doe) - 719468;
}

}  // namespace

std::optional<std::int64_t> parse_created_at(std::string_view text) {
    std::size_t at = 0;
    const auto year = digits(text, at, 4);
    if (!year || !expect(text, at, '-'))
        return std::nullopt;
    const auto month = digits(text, at, 2);
    if (!month || !expect(text, at, '-'))
        return std::nullopt;
    const auto day = digits(text, at, 2);
    if (!day || !(expect(text, at, 'T') || expect(text, at, 't') || expect(text, at, ' ')))
        return std::nullopt;
    const auto hour = digits(text, at, 2);
    if (!hour || !expect(text, at, ':'))
        return std::nullopt;
    const auto minute = digits(text, at, 2);
    if (!minute || !expect(text, at, ':'))
        return std::nullopt;
    const auto second = digits(text, at, 2);
    if (!second || *month < 1 || *month > 12 || *day < 1 || *day > 31 || *hour > 23 ||
        *minute > 59 || *second > 60) {
        return std::nullopt;
    }
    std::int64_t nanos = 0;
    if (at < text.size() && text[at] == '.') {
        ++at;
        std::int64_t scale = 100'000'000;
        const std::size_t first = at;
        while (at < text.size() && text[at] >= '0' && text[at] <= '9') {
            nanos += (text[at] - '0') * scale;  // digits past nanoseconds add nothing
            scale /= 10;
            ++at;
        }
        if (at == first)
            return std::nullopt;
    }
    std::int64_t offset_seconds = 0;
    if (at < text.size() && (text[at] == 'Z' || text[at] == 'z')) {
        ++at;
    } else if (at < text.size() && (text[at] == '+' || text[at] == '-')) {
        const int sign = text[at] == '-' ? -1 : 1;
        ++at;
        const auto oh = digits(text, at, 2);
        if (!oh || !expect(text, at, ':'))
            return std::nullopt;
        const auto om = digits(text, at, 2);
        if (!om)
            return std::nullopt;
        offset_seconds = sign * (*oh * 3600 + *om * 60);
    } else {
        return std::nullopt;  // no zone: not an instant
    }
    if (at != text.size())
        return std::nullopt;
    const std::int64_t seconds =
        days_from_civil(*year, static_cast<unsigned>(*month), static_cast<unsigned>(*day)) * 86400 +
        *hour * 3600 + *minute * 60 + *second - offset_seconds;
    return seconds * 1'000'000'000 + nanos;
}

bool wins_over(const SandboxInfo& a, const SandboxInfo& b) {
    const auto ta = parse_created_at(a.created_at);
    const auto tb = parse_created_at(b.created_at);
    if (ta && tb && *ta != *tb)
        return *ta < *tb;
    if (ta.has_value() != tb.has_value())
        return ta.has_value();
    return a.id < b.id;
}

std::optional<SandboxInfo> winner(const std::vector<SandboxInfo>& holders) {
    const SandboxInfo* best = nullptr;
    for (const auto& holder : holders) {
        // A discarded sandbox whose deletion is not listed yet never holds the key against the
        // replacement made for it (replacement_notice.hpp), whatever their ages.
        if (replacement_notice::replaced_by_another(holder, holders))
            continue;
        if (!best || wins_over(holder, *best))
            best = &holder;
    }
    if (!best)
        return std::nullopt;
    return *best;
}

}  // namespace maf_sandbox::acas::convergence
