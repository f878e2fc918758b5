#include "maf_sandbox/core/log_level.hpp"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <string>

#include "maf_sandbox/core/errors.hpp"

namespace maf_sandbox {
namespace {

TEST(LogLevel, EveryLevelByNameInAnyCase) {
    EXPECT_EQ(parse_log_level("trace"), spdlog::level::trace);
    EXPECT_EQ(parse_log_level("DEBUG"), spdlog::level::debug);
    EXPECT_EQ(parse_log_level("Info"), spdlog::level::info);
    EXPECT_EQ(parse_log_level("warn"), spdlog::level::warn);
    EXPECT_EQ(parse_log_level("warning"), spdlog::level::warn);
    EXPECT_EQ(parse_log_level("error"), spdlog::level::err);
    EXPECT_EQ(parse_log_level("off"), spdlog::level::off);
}

TEST(LogLevel, AnUnknownNameIsAnsweredWithTheLevels) {
    try {
        parse_log_level("verbose");
        FAIL() << "accepted";
    } catch (const InvalidArgument& e) {
        EXPECT_STREQ(e.what(),
                     "'verbose' is not a log level; use trace, debug, info, warn, error or off");
    }
}

TEST(LogLevel, TheEnvironmentVariableIsReadAndNamedWhenWrong) {
    ::setenv(kLogLevelEnv, "debug", 1);
    EXPECT_EQ(log_level_from_environment(), spdlog::level::debug);
    ::setenv(kLogLevelEnv, "", 1);
    EXPECT_EQ(log_level_from_environment(), std::nullopt);
    ::setenv(kLogLevelEnv, "loud", 1);
    try {
        log_level_from_environment();
        ADD_FAILURE() << "accepted";
    } catch (const InvalidArgument& e) {
        EXPECT_NE(std::string(e.what()).find("MAF_SANDBOX_LOG: 'loud' is not a log level"),
                  std::string::npos)
            << e.what();
    }
    ::unsetenv(kLogLevelEnv);
    EXPECT_EQ(log_level_from_environment(), std::nullopt);
}

}  // namespace
}  // namespace maf_sandbox
