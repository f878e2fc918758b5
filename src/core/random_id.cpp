#include "maf_sandbox/core/random_id.hpp"

#include <sys/random.h>

#include <array>
#include <cerrno>

#include "maf_sandbox/core/errors.hpp"

namespace maf_sandbox {
namespace {

constexpr std::array<char, 16> kHexDigits{'0', '1', '2', '3', '4', '5', '6', '7',
                                          '8', '9', 'a', 'b', 'c', 'd', 'e', 'f'};

void append_hex(std::string& text, std::span<const unsigned char> bytes) {
    for (const unsigned char byte : bytes) {
        text += kHexDigits[byte >> 4];
        text += kHexDigits[byte & 0x0f];
    }
}

}  // namespace

void fill_random(std::span<unsigned char> out) {
    std::size_t filled = 0;
    while (filled < out.size()) {
        // Flags 0: blocks only until the pool is first initialised, then never.
        const ssize_t got = ::getrandom(out.data() + filled, out.size() - filled, 0);
        if (got < 0) {
            if (errno == EINTR) {
                continue;
            }
            throw SystemError(errno, "reading the kernel's random source (getrandom)",
                              "check that the kernel offers getrandom and retry");
        }
        filled += static_cast<std::size_t>(got);
    }
}

std::string random_hex(std::size_t bytes) {
    std::string raw(bytes, '\0');
    fill_random(std::span(reinterpret_cast<unsigned char*>(raw.data()), raw.size()));
    std::string text;
    text.reserve(bytes * 2);
    append_hex(text, std::span(reinterpret_cast<const unsigned char*>(raw.data()), raw.size()));
    return text;
}

std::string random_uuid4() {
    std::array<unsigned char, 16> b{};
    fill_random(b);
    b[6] = static_cast<unsigned char>((b[6] & 0x0f) | 0x40);  // version 4
    b[8] = static_cast<unsigned char>((b[8] & 0x3f) | 0x80);  // variant 10
    std::string text;
    text.reserve(36);
    const std::size_t groups[] = {4, 2, 2, 2, 6};
    std::size_t at = 0;
    for (const auto length : groups) {
        if (at > 0) {
            text += '-';
        }
        append_hex(text, std::span<const unsigned char>(b.data() + at, length));
        at += length;
    }
    return text;
}

}  // namespace maf_sandbox
