// The capture answer's frame (exec_capture.hpp): what the host accepts from the guest's single
// capture command, and everything it refuses rather than misread.
#include <gtest/gtest.h>

#include "exec_capture.hpp"

namespace maf_sandbox::acas::capture {
namespace {

const std::string kToken = "maf-exec-0123456789abcdef0123456789abcdef";

std::string framed(const std::string& manifest, const std::string& out, const std::string& err,
                   const std::string& status) {
    return manifest + kToken + "\n" + out + "\n" + kToken + "\n" + err + "\n" + kToken + " " +
           status + "\n";
}

TEST(ExecCapture, InlineOutputIsDecodedWithTheCleanupStatus) {
    // "a\0b" and "" as the guest's base64 prints them (a line break after non-empty output).
    const auto answer = framed(kToken + " 3 3 0\n", "YQBi\n", "", "1");
    const auto capture = parse_capture(kToken, answer);
    ASSERT_TRUE(capture);
    EXPECT_EQ(capture->manifest.exit_code, 3);
    ASSERT_TRUE(capture->output);
    EXPECT_EQ(capture->output->stdout_bytes, std::string("a\0b", 3));
    EXPECT_EQ(capture->output->stderr_bytes, "");
    EXPECT_EQ(capture->output->cleanup_exit, 1);
}

TEST(ExecCapture, OutputOverOneChunkInAllIsLeftForRetrievalAndNothingMayFollowTheManifest) {
    const auto manifest = kToken + " 0 " + std::to_string(kInlineBytes) + " 1\n";
    const auto capture = parse_capture(kToken, manifest);
    ASSERT_TRUE(capture);
    EXPECT_FALSE(capture->output);
    EXPECT_FALSE(parse_capture(kToken, manifest + kToken + "\n"));
    EXPECT_TRUE(fits_inline(Manifest{0, kInlineBytes, 0}));
    EXPECT_FALSE(fits_inline(Manifest{0, kInlineBytes, 1}));
}

TEST(ExecCapture, MalformedInlineAnswersAreRefused) {
    const auto manifest = kToken + " 0 3 0\n";
    EXPECT_FALSE(parse_capture(kToken, manifest));                                 // frame missing
    EXPECT_FALSE(parse_capture(kToken, framed(manifest, "YQBiYw==\n", "", "0")));  // 4 bytes, not 3
    EXPECT_FALSE(parse_capture(kToken, framed(manifest, "YQ-i\n", "", "0")));      // not base64
    EXPECT_FALSE(parse_capture(kToken, framed(manifest, "YQBi\n", "", "x")));      // bad status
    EXPECT_FALSE(parse_capture(kToken, framed(manifest, "YQBi\n", "", "0") + "more"));
    const auto other = "maf-exec-ffffffffffffffffffffffffffffffff";
    EXPECT_FALSE(parse_capture(other, framed(manifest, "YQBi\n", "", "0")));  // another token
    EXPECT_FALSE(parse_capture(kToken, "\n" + framed(manifest, "YQBi\n", "", "0")));
}

}  // namespace
}  // namespace maf_sandbox::acas::capture
