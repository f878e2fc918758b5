#include "maf_sandbox/core/utf8.hpp"

#include <cstdint>

namespace maf_sandbox {
namespace {

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";

// Length of the valid sequence starting at `i`, or the length of the maximal invalid subpart
// (at least 1) negated.
int sequence_at(std::string_view s, std::size_t i) {
    const auto byte = [&](std::size_t k) { return static_cast<std::uint8_t>(s[k]); };
    const std::uint8_t b0 = byte(i);
    if (b0 < 0x80) {
        return 1;
    }
    int need = 0;
    std::uint8_t lo = 0x80;
    std::uint8_t hi = 0xBF;
    if (b0 >= 0xC2 && b0 <= 0xDF) {
        need = 1;
    } else if (b0 == 0xE0) {
        need = 2;
        lo = 0xA0;
    } else if (b0 >= 0xE1 && b0 <= 0xEC) {
        need = 2;
    } else if (b0 == 0xED) {
        need = 2;
        hi = 0x9F;
    } else if (b0 >= 0xEE && b0 <= 0xEF) {
        need = 2;
    } else if (b0 == 0xF0) {
        need = 3;
        lo = 0x90;
    } else if (b0 >= 0xF1 && b0 <= 0xF3) {
        need = 3;
    } else if (b0 == 0xF4) {
        need = 3;
        hi = 0x8F;
    } else {
        return -1;
    }
    for (int k = 1; k <= need; ++k) {
        if (i + k >= s.size()) {
            return -k;
        }
        const std::uint8_t b = byte(i + k);
        const std::uint8_t min = k == 1 ? lo : 0x80;
        const std::uint8_t max = k == 1 ? hi : 0xBF;
        if (b < min || b > max) {
            return -k;
        }
    }
    return need + 1;
}

}  // namespace

std::string replace_invalid_utf8(std::string_view bytes) {
    std::string out;
    out.reserve(bytes.size());
    std::size_t i = 0;
    while (i < bytes.size()) {
        const int n = sequence_at(bytes, i);
        if (n > 0) {
            out.append(bytes.substr(i, static_cast<std::size_t>(n)));
            i += static_cast<std::size_t>(n);
        } else {
            out.append(kReplacement);
            i += static_cast<std::size_t>(-n);
        }
    }
    return out;
}

std::string bounded_utf8(std::string_view text, std::size_t max_bytes) {
    auto clean = replace_invalid_utf8(text);
    if (clean.size() <= max_bytes) {
        return clean;
    }
    std::size_t cut = max_bytes;
    while (cut > 0 && (static_cast<unsigned char>(clean[cut]) & 0xC0) == 0x80) {
        --cut;
    }
    clean.resize(cut);
    return clean + " (truncated)";
}

bool is_valid_utf8(std::string_view bytes) {
    std::size_t i = 0;
    while (i < bytes.size()) {
        const int n = sequence_at(bytes, i);
        if (n <= 0) {
            return false;
        }
        i += static_cast<std::size_t>(n);
    }
    return true;
}

}  // namespace maf_sandbox
