// ExecResult's two faces (README "Exec bytes and text views"): the byte fields keep exactly what
// the program wrote; the text views are UTF-8 with every invalid sequence replaced by U+FFFD.
#include <gtest/gtest.h>

#include "maf_sandbox/core/types.hpp"

namespace maf_sandbox {
namespace {

const std::string kReplacement = "\xef\xbf\xbd";

TEST(ExecResultViews, TheBytesAreKeptAndTheTextViewsReplaceInvalidSequences) {
    ExecResult result;
    result.stdout_bytes = std::string("ok \xff\xfe end\0", 10);
    result.stderr_bytes = "caf\xc3";  // a sequence cut short at the end
    EXPECT_EQ(result.stdout_bytes.size(), 10u);
    EXPECT_EQ(result.stdout_text(), "ok " + kReplacement + kReplacement + std::string(" end\0", 5));
    EXPECT_EQ(result.stderr_text(), "caf" + kReplacement);
    EXPECT_EQ(result.stderr_bytes, "caf\xc3");  // the view changed nothing
}

TEST(ExecResultViews, ValidUtf8IsTheSameInBothFaces) {
    ExecResult result;
    result.stdout_bytes = "h\xc3\xa9llo \xe2\x82\xac \xf0\x9f\x99\x82";
    EXPECT_EQ(result.stdout_text(), result.stdout_bytes);
    EXPECT_EQ(result.stderr_text(), "");
}

TEST(ExecResultViews, OverlongAndSurrogateEncodingsAreInvalid) {
    ExecResult result;
    result.stdout_bytes = "\xc0\xaf|\xed\xa0\x80";
    const auto text = result.stdout_text();
    EXPECT_EQ(text.find("\xc0"), std::string::npos);
    EXPECT_EQ(text.find("\xed\xa0"), std::string::npos);
    EXPECT_NE(text.find(kReplacement), std::string::npos);
    EXPECT_NE(text.find('|'), std::string::npos);
}

}  // namespace
}  // namespace maf_sandbox
