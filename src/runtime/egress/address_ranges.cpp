#include "address_ranges.hpp"

#include <array>
#include <cstdint>

namespace maf_sandbox::runtime {
namespace {

using boost::asio::ip::address_v4;
using boost::asio::ip::address_v6;

struct V4Range {
    std::uint32_t network;
    int prefix;
    AddressRange range;
};

constexpr std::uint32_t v4(unsigned a, unsigned b, unsigned c, unsigned d) {
    return (a << 24) | (b << 16) | (c << 8) | d;
}

// Most specific first: the metadata address lies inside link-local.
constexpr std::array kV4Ranges{
    V4Range{v4(169, 254, 169, 254), 32, AddressRange::metadata},
    V4Range{v4(255, 255, 255, 255), 32, AddressRange::reserved},
    V4Range{v4(0, 0, 0, 0), 8, AddressRange::unspecified},
    V4Range{v4(127, 0, 0, 0), 8, AddressRange::loopback},
    V4Range{v4(169, 254, 0, 0), 16, AddressRange::link_local},
    V4Range{v4(10, 0, 0, 0), 8, AddressRange::private_use},
    V4Range{v4(172, 16, 0, 0), 12, AddressRange::private_use},
    V4Range{v4(192, 168, 0, 0), 16, AddressRange::private_use},
    V4Range{v4(100, 64, 0, 0), 10, AddressRange::private_use},
    V4Range{v4(192, 0, 0, 0), 24, AddressRange::reserved},
    V4Range{v4(198, 18, 0, 0), 15, AddressRange::reserved},
    V4Range{v4(224, 0, 0, 0), 4, AddressRange::multicast},
    V4Range{v4(240, 0, 0, 0), 4, AddressRange::reserved},
};

AddressRange classify_v4(std::uint32_t address) {
    for (const auto& range : kV4Ranges) {
        const std::uint32_t mask = range.prefix == 0 ? 0 : ~std::uint32_t{0} << (32 - range.prefix);
        if ((address & mask) == range.network) {
            return range.range;
        }
    }
    return AddressRange::global;
}

bool has_prefix(const address_v6::bytes_type& bytes, std::initializer_list<std::uint8_t> prefix,
                int bits) {
    auto it = prefix.begin();
    for (int i = 0; bits > 0; ++i, ++it, bits -= 8) {
        const std::uint8_t mask = bits >= 8 ? 0xff : static_cast<std::uint8_t>(0xff << (8 - bits));
        if ((bytes[static_cast<std::size_t>(i)] & mask) != (*it & mask)) {
            return false;
        }
    }
    return true;
}

std::uint32_t v4_at(const address_v6::bytes_type& bytes, std::size_t offset) {
    return (std::uint32_t{bytes[offset]} << 24) | (std::uint32_t{bytes[offset + 1]} << 16) |
           (std::uint32_t{bytes[offset + 2]} << 8) | std::uint32_t{bytes[offset + 3]};
}

AddressRange classify_v6(const address_v6& address) {
    const auto bytes = address.to_bytes();
    static constexpr address_v6::bytes_type kMetadata{0xfd, 0x00, 0x0e, 0xc2, 0, 0, 0,    0,
                                                      0,    0,    0,    0,    0, 0, 0x02, 0x54};
    if (bytes == kMetadata) {
        return AddressRange::metadata;
    }
    if (address.is_unspecified()) {
        return AddressRange::unspecified;
    }
    if (address.is_loopback()) {
        return AddressRange::loopback;
    }
    // ::ffff:0:0/96 (mapped) and ::/96 (compatible) and 64:ff9b::/96 (NAT64) end in an IPv4.
    if (has_prefix(bytes, {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff}, 96) ||
        has_prefix(bytes, {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, 96) ||
        has_prefix(bytes, {0, 0x64, 0xff, 0x9b, 0, 0, 0, 0, 0, 0, 0, 0}, 96)) {
        return classify_v4(v4_at(bytes, 12));
    }
    // 2002::/16 (6to4) carries its IPv4 in bytes 2..5.
    if (has_prefix(bytes, {0x20, 0x02}, 16)) {
        return classify_v4(v4_at(bytes, 2));
    }
    if (has_prefix(bytes, {0xfe, 0x80}, 10)) {
        return AddressRange::link_local;
    }
    if (has_prefix(bytes, {0xfc}, 7) || has_prefix(bytes, {0xfe, 0xc0}, 10)) {
        return AddressRange::private_use;  // ULA and the deprecated site-local
    }
    if (has_prefix(bytes, {0xff}, 8)) {
        return AddressRange::multicast;
    }
    // 100::/64 discard, 2001:db8::/32 documentation, 64:ff9b:1::/48 local NAT64.
    if (has_prefix(bytes, {0x01, 0x00, 0, 0, 0, 0, 0, 0}, 64) ||
        has_prefix(bytes, {0x20, 0x01, 0x0d, 0xb8}, 32) ||
        has_prefix(bytes, {0, 0x64, 0xff, 0x9b, 0, 0x01}, 48)) {
        return AddressRange::reserved;
    }
    return AddressRange::global;
}

}  // namespace

AddressRange classify_address(const boost::asio::ip::address& address) {
    if (address.is_v4()) {
        return classify_v4(address.to_v4().to_uint());
    }
    return classify_v6(address.to_v6());
}

std::string_view to_string(AddressRange range) {
    switch (range) {
        case AddressRange::global:
            return "global";
        case AddressRange::unspecified:
            return "unspecified";
        case AddressRange::loopback:
            return "loopback";
        case AddressRange::link_local:
            return "link-local";
        case AddressRange::private_use:
            return "private";
        case AddressRange::metadata:
            return "metadata";
        case AddressRange::multicast:
            return "multicast";
        case AddressRange::reserved:
            return "reserved";
    }
    return "reserved";
}

std::optional<std::string_view> refused_address(const boost::asio::ip::address& address,
                                                bool allow_private) {
    switch (classify_address(address)) {
        case AddressRange::global:
            return std::nullopt;
        case AddressRange::loopback:
            return allow_private ? std::nullopt
                                 : std::optional<std::string_view>("address is loopback");
        case AddressRange::link_local:
            return allow_private ? std::nullopt
                                 : std::optional<std::string_view>("address is link-local");
        case AddressRange::private_use:
            return allow_private ? std::nullopt
                                 : std::optional<std::string_view>("address is private");
        case AddressRange::metadata:
            return allow_private ? std::nullopt
                                 : std::optional<std::string_view>("address is cloud metadata");
        case AddressRange::unspecified:
            return "address is unspecified";
        case AddressRange::multicast:
            return "address is multicast";
        case AddressRange::reserved:
            return "address is reserved";
    }
    return "address is reserved";
}

}  // namespace maf_sandbox::runtime
