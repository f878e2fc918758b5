// The ACAS client's reading of an exec answer (src/acas/wire.cpp) on exit codes that do not fit an
// int: refused as a malformed answer, never wrapped into another code (4294967296 is not 0).
#include <gtest/gtest.h>

#include <boost/json/parse.hpp>

#include "acas/wire.hpp"
#include "maf_sandbox/acas/errors.hpp"

namespace maf_sandbox::acas {
namespace {

TEST(AcasWireBadInput, AnExitCodeOutsideTheIntRangeIsAMalformedAnswer) {
    for (const auto* code : {"4294967296", "2147483648", "-2147483649", "9223372036854775807",
                             "18446744073709551615", "1.5", "\"0\""}) {
        const auto answer =
            boost::json::parse(std::string(R"({"stdout":"","exitCode":)") + code + "}");
        EXPECT_THROW(wire::parse_exec_answer(answer), AcasServiceError) << code;
    }
}

TEST(AcasWireBadInput, ExitCodesInsideTheIntRangeReadAsSent) {
    for (const int code : {0, 1, 137, 255, -9, 2147483647, -2147483647 - 1}) {
        const auto answer =
            boost::json::parse(R"({"stdout":"","exitCode":)" + std::to_string(code) + "}");
        EXPECT_EQ(wire::parse_exec_answer(answer).exit_code, code);
    }
}

}  // namespace
}  // namespace maf_sandbox::acas
