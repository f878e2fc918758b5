// The in-process fake backend (docs/protocol.md 7) refuses every bad path the way a real backend
// must, and a refusal changes nothing in its stores.
#include <gtest/gtest.h>

#include <boost/asio/io_context.hpp>

#include "maf_sandbox/core/in_process.hpp"
#include "path_battery.hpp"

namespace maf_sandbox::badinput {
namespace {

TEST(InProcessBadPaths, EveryPathTakingCallRefusesNulInvalidUtf8AndTraversalAndChangesNothing) {
    boost::asio::io_context io;
    InProcessSandboxOptions options;
    options.base_directory = "/work";
    options.seed_files = {{"/work/kept.txt", std::string("kept")},
                          {"/etc/passwd", std::string("root:x:0:0")},
                          {"/tmp/maf-badinput/sentinel", std::string("host")}};
    InProcessSandbox sandbox(options);
    const auto contents = sandbox.contents();
    const auto directories = sandbox.directories();
    const auto symlinks = sandbox.symlinks();

    expect_every_path_call_refuses(io, sandbox, bad_paths());

    EXPECT_EQ(sandbox.contents(), contents);
    EXPECT_EQ(sandbox.directories(), directories);
    EXPECT_EQ(sandbox.symlinks(), symlinks);
}

TEST(InProcessBadPaths, ExecRefusesAWorkingDirectoryWithNulOrInvalidUtf8) {
    boost::asio::io_context io;
    InProcessSandbox sandbox;
    expect_exec_refuses_bad_working_directories(io, sandbox);
    EXPECT_TRUE(sandbox.commands().empty()) << "a refused exec was recorded as run";
}

}  // namespace
}  // namespace maf_sandbox::badinput
