#include "maf_sandbox/core/random_id.hpp"

#include <gtest/gtest.h>

#include <array>
#include <regex>
#include <set>

namespace maf_sandbox {
namespace {

TEST(RandomHex, IsTwiceTheByteCountInLowercaseHex) {
    for (const std::size_t bytes : {0u, 1u, 6u, 16u, 32u}) {
        const auto text = random_hex(bytes);
        EXPECT_EQ(text.size(), bytes * 2);
        EXPECT_TRUE(std::regex_match(text, std::regex("[0-9a-f]*"))) << text;
    }
}

TEST(RandomHex, DoesNotRepeatAcrossManyDraws) {
    std::set<std::string> seen;
    for (int i = 0; i < 1000; ++i) {
        EXPECT_TRUE(seen.insert(random_hex(8)).second);
    }
}

TEST(RandomUuid4, HasTheVersion4LayoutAndVariant) {
    const std::regex layout("[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}");
    std::set<std::string> seen;
    for (int i = 0; i < 200; ++i) {
        const auto id = random_uuid4();
        EXPECT_TRUE(std::regex_match(id, layout)) << id;
        EXPECT_TRUE(seen.insert(id).second);
    }
}

TEST(FillRandom, FillsEveryByteOfALargeBuffer) {
    // A buffer over getrandom's single-call guarantee for small requests; every position must
    // take more than one value across the draws (a short read would leave a tail of zeros).
    std::array<unsigned char, 4096> buffer{};
    std::array<bool, 4096> changed{};
    for (int draw = 0; draw < 8; ++draw) {
        fill_random(buffer);
        for (std::size_t i = 0; i < buffer.size(); ++i) {
            changed[i] = changed[i] || buffer[i] != 0;
        }
    }
    for (std::size_t i = 0; i < changed.size(); ++i) {
        ASSERT_TRUE(changed[i]) << "byte " << i << " was zero in every draw";
    }
}

}  // namespace
}  // namespace maf_sandbox
