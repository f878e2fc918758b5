#include "maf_sandbox/core/quantities.hpp"

#include <gtest/gtest.h>

#include <string>

#include "maf_sandbox/core/errors.hpp"

namespace maf_sandbox {
namespace {

std::string refusal_of_size(const std::string& text) {
    try {
        parse_byte_size(text);
    } catch (const InvalidArgument& e) {
        return e.what();
    }
    return "accepted";
}

std::string refusal_of_duration(const std::string& text) {
    try {
        parse_duration(text);
    } catch (const InvalidArgument& e) {
        return e.what();
    }
    return "accepted";
}

TEST(ByteSize, SuffixesAre1024BasedAndTheSiOnes1000Based) {
    EXPECT_EQ(parse_byte_size("4096"), 4096u);
    EXPECT_EQ(parse_byte_size("512M"), 512ull << 20);
    EXPECT_EQ(parse_byte_size("512Mi"), 512ull << 20);
    EXPECT_EQ(parse_byte_size("512MiB"), 512ull << 20);
    EXPECT_EQ(parse_byte_size("2G"), 2ull << 30);
    EXPECT_EQ(parse_byte_size("64k"), 64ull << 10);
    EXPECT_EQ(parse_byte_size("1T"), 1ull << 40);
    EXPECT_EQ(parse_byte_size("500MB"), 500'000'000u);
    EXPECT_EQ(parse_byte_size("1.5G"), 3ull << 29);
    EXPECT_EQ(parse_byte_size("10B"), 10u);
}

TEST(ByteSize, AMistakeIsAnsweredWithTheFormsNotARange) {
    for (const char* bad : {"", "M", "512X", "-1", "1.5", "12 M", "0x10"}) {
        const auto message = refusal_of_size(bad);
        EXPECT_NE(message.find("give bytes, or 512K, 512M, 2G"), std::string::npos) << bad;
        EXPECT_LT(message.size(), 200u) << message;
    }
    EXPECT_NE(refusal_of_size("512X").find("'512X' has an unknown unit"), std::string::npos);
    const auto huge = refusal_of_size(std::string(300, '9'));
    EXPECT_NE(huge.find("is too large"), std::string::npos) << huge;
    EXPECT_LT(huge.size(), 200u) << huge;
    EXPECT_NE(refusal_of_size("17000000T").find("is too large"), std::string::npos);
}

TEST(Duration, SecondsMinutesHoursAndTheirSums) {
    EXPECT_DOUBLE_EQ(parse_duration("90").count(), 90.0);
    EXPECT_DOUBLE_EQ(parse_duration("90s").count(), 90.0);
    EXPECT_DOUBLE_EQ(parse_duration("2m").count(), 120.0);
    EXPECT_DOUBLE_EQ(parse_duration("1h").count(), 3600.0);
    EXPECT_DOUBLE_EQ(parse_duration("1m30s").count(), 90.0);
    EXPECT_DOUBLE_EQ(parse_duration("500ms").count(), 0.5);
    EXPECT_DOUBLE_EQ(parse_duration("2.5").count(), 2.5);
}

TEST(Duration, AMistakeIsAnsweredWithTheForms) {
    for (const char* bad : {"", "s", "90x", "1m30", "-5s", "ten"}) {
        const auto message = refusal_of_duration(bad);
        EXPECT_NE(message.find("give seconds, or 500ms, 90s, 2m"), std::string::npos) << bad;
    }
    EXPECT_NE(refusal_of_duration("9999h").find("is too long"), std::string::npos);
    EXPECT_NE(refusal_of_duration(std::string(300, '9')).find("is too long"), std::string::npos);
}

}  // namespace
}  // namespace maf_sandbox
