// Which addresses the egress proxy refuses to connect to, whatever a name resolved to.
#pragma once

#include <boost/asio/ip/address.hpp>
#include <optional>
#include <string_view>

namespace maf_sandbox::runtime {

enum class AddressRange {
    global,       // anything not listed below
    unspecified,  // 0.0.0.0/8 ("this network"), ::
    loopback,     // 127/8, ::1
    link_local,   // 169.254/16, fe80::/10
    private_use,  // 10/8, 172.16/12, 192.168/16, 100.64/10 (CGNAT), fc00::/7 (ULA)
    metadata,     // 169.254.169.254, fd00:ec2::254 (cloud instance metadata)
    multicast,    // 224/4, ff00::/8
    reserved,     // 240/4 and 255.255.255.255, 192.0.0/24, 198.18/15, and the IPv6
                  // documentation and discard prefixes
};

// Classifies `address`. IPv6 forms that carry an IPv4 address (IPv4-mapped ::ffff:a.b.c.d,
// IPv4-compatible ::a.b.c.d, NAT64 64:ff9b::/96, 6to4 2002::/16) are classified by the IPv4
// address inside, so a mapped spelling never escapes its range.
AddressRange classify_address(const boost::asio::ip::address& address);

std::string_view to_string(AddressRange range);

// Why the proxy refuses to connect to `address`, or nothing when it may. allow_private (an
// operator switch for tests) admits loopback, link-local, private and metadata addresses, never
// unspecified, multicast or reserved ones.
std::optional<std::string_view> refused_address(const boost::asio::ip::address& address,
                                                bool allow_private);

}  // namespace maf_sandbox::runtime
