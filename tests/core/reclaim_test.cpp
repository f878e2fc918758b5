#include "maf_sandbox/core/reclaim.hpp"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "host_shell_sandbox.hpp"
#include "maf_sandbox/core/errors.hpp"
#include "maf_sandbox/core/run_blocking.hpp"
#include "recording_sandbox.hpp"

namespace maf_sandbox {
namespace {

namespace fs = std::filesystem;
using testing::HostShellSandbox;
using testing::RecordingSandbox;

class ReclaimGuestPath : public ::testing::Test {
  protected:
    std::optional<std::string> reclaim(std::string path, std::string working_directory) {
        return run_blocking(reclaim_guest_path(recorder, std::move(path),
                                               std::move(working_directory), Seconds{10}));
    }
    std::string work() const { return host.base_directory(); }

    HostShellSandbox host;
    RecordingSandbox recorder{host};
};

TEST_F(ReclaimGuestPath, RemovesTheCallDirectoryFromTheRootWithAQuotedPath) {
    const auto call = fs::path(work()) / "call dir 'quoted'";
    fs::create_directories(call / "deep");
    std::ofstream(call / "deep/file.txt") << "x";
    std::ofstream(fs::path(work()) / "bystander.txt") << "y";
    EXPECT_EQ(reclaim("call dir 'quoted'", work()), std::nullopt);
    EXPECT_FALSE(fs::exists(call));
    EXPECT_TRUE(fs::exists(fs::path(work()) / "bystander.txt"));
    ASSERT_EQ(recorder.execs.size(), 1u);
    EXPECT_EQ(recorder.execs[0].working_directory, "/");
    EXPECT_EQ(std::get<std::string>(recorder.execs[0].command),
              "rm -rf '" + work() + "/call dir '\\''quoted'\\'''");
}

TEST_F(ReclaimGuestPath, AMissingDirectoryIsSuccess) {
    EXPECT_EQ(reclaim("never-made", work()), std::nullopt);
}

TEST_F(ReclaimGuestPath, RefusesAPathOutsideTheWorkingDirectoryWithoutRunningAnything) {
    EXPECT_TRUE(reclaim("../elsewhere", work()).has_value());
    EXPECT_TRUE(reclaim("/etc", work()).has_value());
    EXPECT_TRUE(recorder.execs.empty());
}

TEST_F(ReclaimGuestPath, RefusesTheWorkingDirectoryItselfInAnySpelling) {
    for (const std::string& spelling : {std::string(""), std::string("."), std::string("./"),
                                        work(), work() + "/", std::string("sub/..")}) {
        EXPECT_TRUE(reclaim(spelling, work()).has_value()) << spelling;
    }
    EXPECT_TRUE(recorder.execs.empty());
    EXPECT_TRUE(fs::exists(work()));
}

TEST_F(ReclaimGuestPath, RefusesOneComponentFromTheRoot) {
    const auto reason = reclaim("tmp", "/");
    ASSERT_TRUE(reason.has_value());
    EXPECT_NE(reason->find("two path components"), std::string::npos);
    EXPECT_TRUE(recorder.execs.empty());
}

TEST_F(ReclaimGuestPath, ATransportFailureBecomesAReason) {
    recorder.exec_failure = std::make_exception_ptr(Timeout("the guest went away"));
    const auto reason = reclaim("call", work());
    ASSERT_TRUE(reason.has_value());
    EXPECT_EQ(*reason, "the removal call failed: Timeout: the guest went away");
}

TEST_F(ReclaimGuestPath, AGuestRefusalBecomesAReasonWithItsExitCode) {
    // The command is bent to fail the way a guest refusal does, and the rest stays real.
    recorder.rewrite = [](ExecRequest& request) {
        request.command = std::string("echo 'rm: cannot remove: Permission denied' >&2; exit 1");
    };
    const auto reason = reclaim("call", work());
    ASSERT_TRUE(reason.has_value());
    EXPECT_NE(reason->find("exited with code 1"), std::string::npos);
    EXPECT_NE(reason->find("Permission denied"), std::string::npos);
}

}  // namespace
}  // namespace maf_sandbox
