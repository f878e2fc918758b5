#include "address_ranges.hpp"

#include <gtest/gtest.h>

#include <utility>
#include <vector>

namespace maf_sandbox::runtime {
namespace {

using boost::asio::ip::make_address;

TEST(AddressRanges, ClassifiesEveryRefusedRangeAndItsMappedForms) {
    const std::vector<std::pair<const char*, AddressRange>> cases{
        {"127.0.0.1", AddressRange::loopback},
        {"127.255.1.2", AddressRange::loopback},
        {"::1", AddressRange::loopback},
        {"::ffff:127.0.0.1", AddressRange::loopback},
        {"::127.0.0.1", AddressRange::loopback},
        {"64:ff9b::7f00:1", AddressRange::loopback},
        {"2002:7f00:1::", AddressRange::loopback},
        {"169.254.1.1", AddressRange::link_local},
        {"fe80::1", AddressRange::link_local},
        {"febf::1", AddressRange::link_local},
        {"10.1.2.3", AddressRange::private_use},
        {"172.16.0.1", AddressRange::private_use},
        {"172.31.255.255", AddressRange::private_use},
        {"192.168.0.1", AddressRange::private_use},
        {"100.64.0.1", AddressRange::private_use},
        {"100.127.255.255", AddressRange::private_use},
        {"fc00::1", AddressRange::private_use},
        {"fdff::1", AddressRange::private_use},
        {"::ffff:10.0.0.1", AddressRange::private_use},
        {"169.254.169.254", AddressRange::metadata},
        {"::ffff:169.254.169.254", AddressRange::metadata},
        {"fd00:ec2::254", AddressRange::metadata},
        {"0.0.0.0", AddressRange::unspecified},
        {"0.1.2.3", AddressRange::unspecified},
        {"::", AddressRange::unspecified},
        {"::ffff:0.0.0.0", AddressRange::unspecified},
        {"224.0.0.1", AddressRange::multicast},
        {"239.255.255.250", AddressRange::multicast},
        {"ff02::1", AddressRange::multicast},
        {"::ffff:224.0.0.1", AddressRange::multicast},
        {"255.255.255.255", AddressRange::reserved},
        {"240.0.0.1", AddressRange::reserved},
        {"2001:db8::1", AddressRange::reserved},
        {"172.32.0.1", AddressRange::global},
        {"100.128.0.1", AddressRange::global},
        {"192.169.0.1", AddressRange::global},
        {"93.184.215.14", AddressRange::global},
        {"2606:4700::1111", AddressRange::global},
        {"::ffff:93.184.215.14", AddressRange::global},
    };
    for (const auto& [text, range] : cases) {
        EXPECT_EQ(classify_address(make_address(text)), range) << text;
    }
}

TEST(AddressRanges, AllowPrivateAdmitsLocalRangesButNeverUnspecifiedOrMulticast) {
    for (const char* text :
         {"127.0.0.1", "::1", "10.0.0.1", "169.254.169.254", "fe80::1", "::ffff:127.0.0.1"}) {
        EXPECT_TRUE(refused_address(make_address(text), false)) << text;
        EXPECT_FALSE(refused_address(make_address(text), true)) << text;
    }
    for (const char* text : {"0.0.0.0", "::", "224.0.0.1", "ff02::1", "255.255.255.255"}) {
        EXPECT_TRUE(refused_address(make_address(text), true)) << text;
    }
    EXPECT_FALSE(refused_address(make_address("93.184.215.14"), false));
    EXPECT_EQ(refused_address(make_address("::ffff:127.0.0.1"), false), "address is loopback");
}

}  // namespace
}  // namespace maf_sandbox::runtime
