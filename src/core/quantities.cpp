#include "maf_sandbox/core/quantities.hpp"

#include <fmt/format.h>

#include <array>
#include <cctype>
#include <cmath>
#include <limits>
#include <optional>

#include "maf_sandbox/core/errors.hpp"

namespace maf_sandbox {
namespace {

// What a person typed, cut short so that a pasted blob cannot flood the message.
std::string shown(std::string_view text) {
    constexpr std::size_t kShown = 40;
    return text.size() <= kShown ? std::string(text) : std::string(text.substr(0, kShown)) + "...";
}

// The leading decimal number of `text` (digits, at most one '.'), consumed from it.
std::optional<double> take_number(std::string_view& text) {
    std::size_t end = 0;
    bool dot = false;
    bool digit = false;
    while (end < text.size()) {
        const char c = text[end];
        if (std::isdigit(static_cast<unsigned char>(c))) {
            digit = true;
        } else if (c == '.' && !dot) {
            dot = true;
        } else {
            break;
        }
        ++end;
    }
    if (!digit) {
        return std::nullopt;
    }
    // A bounded copy: the digits of a sane quantity fit easily, and strtod needs a terminator.
    const bool too_long = end > 64;
    const std::string digits(text.substr(0, too_long ? 0 : end));
    text.remove_prefix(end);
    if (too_long) {
        return std::numeric_limits<double>::infinity();
    }
    return std::strtod(digits.c_str(), nullptr);
}

struct Unit {
    std::string_view suffix;
    double factor;
};

constexpr double kKi = 1024.0;
constexpr std::array<Unit, 17> kSizeUnits{{
    {"", 1.0},
    {"B", 1.0},
    {"K", kKi},
    {"Ki", kKi},
    {"KiB", kKi},
    {"M", kKi* kKi},
    {"Mi", kKi* kKi},
    {"MiB", kKi* kKi},
    {"G", kKi* kKi* kKi},
    {"Gi", kKi* kKi* kKi},
    {"GiB", kKi* kKi* kKi},
    {"T", kKi* kKi* kKi* kKi},
    {"Ti", kKi* kKi* kKi* kKi},
    {"TiB", kKi* kKi* kKi* kKi},
    {"KB", 1e3},
    {"MB", 1e6},
    {"GB", 1e9},
}};

bool same_unit(std::string_view a, std::string_view b) {
    if (a.size() != b.size()) {
        return false;
    }
    for (std::size_t i = 0; i < a.size(); ++i) {
        // k and K are one unit (both spellings are common); m is minutes for durations, so only
        // sizes are compared without case, and only for their first letter.
        const bool first = i == 0;
        const char x =
            first ? static_cast<char>(std::toupper(static_cast<unsigned char>(a[i]))) : a[i];
        const char y =
            first ? static_cast<char>(std::toupper(static_cast<unsigned char>(b[i]))) : b[i];
        if (x != y) {
            return false;
        }
    }
    return true;
}

[[noreturn]] void bad_size(std::string_view text, std::string_view why) {
    throw InvalidArgument(fmt::format("'{}' {}; give {}", shown(text), why, kByteSizeForms));
}

[[noreturn]] void bad_duration(std::string_view text, std::string_view why) {
    throw InvalidArgument(fmt::format("'{}' {}; give {}", shown(text), why, kDurationForms));
}

}  // namespace

std::uint64_t parse_byte_size(std::string_view text) {
    std::string_view rest = text;
    const auto number = take_number(rest);
    if (!number) {
        bad_size(text, "is not a size");
    }
    const Unit* unit = nullptr;
    for (const auto& candidate : kSizeUnits) {
        if (same_unit(rest, candidate.suffix)) {
            unit = &candidate;
            break;
        }
    }
    if (unit == nullptr) {
        bad_size(text, "has an unknown unit");
    }
    if (unit->factor == 1.0 && text.find('.') != std::string_view::npos) {
        bad_size(text, "is not a whole number of bytes");
    }
    const double bytes = std::floor(*number * unit->factor);
    // 2^64 is exactly representable; anything at or past it does not fit.
    if (!(bytes < 18446744073709551616.0)) {
        bad_size(text, "is too large (at most 16 EiB)");
    }
    return static_cast<std::uint64_t>(bytes);
}

Seconds parse_duration(std::string_view text) {
    constexpr double kYear = 366.0 * 24 * 3600;
    std::string_view rest = text;
    double total = 0.0;
    bool bare = true;
    do {
        const auto number = take_number(rest);
        if (!number) {
            bad_duration(text, "is not a duration");
        }
        double factor = 0.0;
        if (rest.empty() && bare) {
            factor = 1.0;  // a bare number is seconds
        } else if (rest.starts_with("ms")) {
            factor = 1e-3;
            rest.remove_prefix(2);
        } else if (rest.starts_with("s")) {
            factor = 1.0;
            rest.remove_prefix(1);
        } else if (rest.starts_with("m")) {
            factor = 60.0;
            rest.remove_prefix(1);
        } else if (rest.starts_with("h")) {
            factor = 3600.0;
            rest.remove_prefix(1);
        } else {
            bad_duration(text, rest.empty() ? "has a part without a unit" : "has an unknown unit");
        }
        bare = false;
        total += *number * factor;
    } while (!rest.empty());
    if (!(total <= kYear)) {
        bad_duration(text, "is too long (at most a year)");
    }
    return Seconds{total};
}

}  // namespace maf_sandbox
