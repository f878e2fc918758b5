// The storage base (README, the paragraph before "Quickstart"): acquire ensures it exists through
// the data plane's mkdir, on cold acquisition and on warm reuse; an existing base keeps its
// contents and mode; a link or a non-directory fails acquire; runtime-only workloads need none;
// relative working directories resolve beneath it and "." names it.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "harness.hpp"

namespace maf_sandbox::acas {
namespace {

using maf_sandbox::testing::drive;
using maf_sandbox::testing::TempDir;
namespace fs = std::filesystem;

// No guest command ever names the base: it is made by the file plane alone.
void expect_no_command_names(testing::FakeAcasService& service, const std::string& path) {
    for (const auto& command : service.exec_commands())
        EXPECT_EQ(command.find(path), std::string::npos) << command;
}

TEST(AcasStorageBase, AColdAcquireCreatesTheBaseAndItsMissingParentsThroughTheFilePlane) {
    Harness h;
    auto backend = h.backend();
    const auto base = (h.work.path() / "deep" / "er" / "base").string();
    const auto spec = h.spec([&](auto& f) { f.work_dir = base; });
    auto sandbox = drive(h.io, backend->acquire(kKey, spec));
    EXPECT_TRUE(fs::is_directory(base));
    EXPECT_EQ(sandbox->base_directory(), base);
    EXPECT_EQ(h.service.mkdirs(), std::vector<std::string>{base});
    expect_no_command_names(h.service, base);
}

TEST(AcasStorageBase, AWarmAcquireRecreatesABaseRemovedSinceTheLastOne) {
    Harness h;
    auto backend = h.backend();
    drive(h.io, backend->acquire(kKey, h.spec()));
    const auto base = (h.work.path() / "work").string();
    ASSERT_TRUE(fs::is_directory(base));
    fs::remove_all(base);  // the guest (or anyone) removed it between calls
    drive(h.io, backend->acquire(kKey, h.spec()));
    EXPECT_EQ(h.service.count("PUT", "/sandboxes"), 1u);  // warm reuse, not a new sandbox
    EXPECT_TRUE(fs::is_directory(base));
    EXPECT_EQ(h.service.mkdirs().size(), 2u);
    expect_no_command_names(h.service, base);
}

TEST(AcasStorageBase, AnExistingBaseKeepsItsContentsAndMode) {
    Harness h;
    const auto base = h.work.path() / "work";
    fs::create_directories(base);
    ::chmod(base.c_str(), 0711);
    ASSERT_EQ(::chown(base.c_str(), 4321, 4322), 0);  // the tests run as root
    std::ofstream(base / "kept.txt") << "kept";
    auto backend = h.backend();
    auto sandbox = drive(h.io, backend->acquire(kKey, h.spec()));
    struct stat st {};
    ASSERT_EQ(::stat(base.c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 07777, 0711u);
    EXPECT_EQ(st.st_uid, 4321u);
    EXPECT_EQ(st.st_gid, 4322u);
    EXPECT_EQ(drive(h.io, sandbox->read_file("kept.txt", "", 100)), "kept");
}

TEST(AcasStorageBase, ABaseThatIsALinkFailsAcquireAndDisposesTheNewSandbox) {
    Harness h;
    TempDir elsewhere;
    fs::create_directory_symlink(elsewhere.path(), h.work.path() / "work");
    auto backend = h.backend();
    EXPECT_THROW(drive(h.io, backend->acquire(kKey, h.spec())), ConfinementEscape);
    EXPECT_EQ(h.service.count("PUT", "/sandboxes"), 1u);
    EXPECT_EQ(h.service.live_sandboxes(), 0u);
    EXPECT_TRUE(h.service.mkdirs().empty());  // refused before mkdir could follow the link
}

TEST(AcasStorageBase, ABaseBelowALinkedAncestorFailsAcquire) {
    Harness h;
    TempDir elsewhere;
    fs::create_directory_symlink(elsewhere.path(), h.work.path() / "linked");
    auto backend = h.backend();
    const auto spec =
        h.spec([&](auto& f) { f.work_dir = (h.work.path() / "linked" / "work").string(); });
    EXPECT_THROW(drive(h.io, backend->acquire(kKey, spec)), ConfinementEscape);
    EXPECT_FALSE(fs::exists(elsewhere.path() / "work"));
    EXPECT_EQ(h.service.live_sandboxes(), 0u);
}

TEST(AcasStorageBase, ABaseThatIsARegularFileFailsAcquireAndIsLeftAlone) {
    Harness h;
    std::ofstream(h.work.path() / "work") << "not a directory";
    auto backend = h.backend();
    EXPECT_THROW(drive(h.io, backend->acquire(kKey, h.spec())), NotADirectory);
    EXPECT_TRUE(fs::is_regular_file(h.work.path() / "work"));
    EXPECT_EQ(h.service.live_sandboxes(), 0u);
}

TEST(AcasStorageBase, ARuntimeOnlyWorkloadNeedsNoBaseAndNoProbe) {
    Harness h;
    // A base that would fail the check: a runtime-only workload never looks at it.
    std::ofstream(h.work.path() / "work") << "not a directory";
    auto backend = h.backend();
    drive(h.io, backend->acquire(kKey, h.spec([](auto& f) { f.requires_capabilities = {}; })));
    EXPECT_EQ(h.service.count("PUT", "/sandboxes"), 1u);
    EXPECT_TRUE(h.service.mkdirs().empty());
    EXPECT_TRUE(h.service.exec_commands().empty());
    EXPECT_EQ(h.service.count("GET", "/files/stat"), 0u);
}

TEST(AcasStorageBase, WithoutAWorkDirTheBackendAllocatesItsDefaultBase) {
    Harness h;
    auto backend = h.backend();
    const auto spec = h.spec([](auto& f) {
        f.work_dir.reset();
        f.requires_capabilities = {};  // the default base is a guest path, not one of this host's
    });
    auto sandbox = drive(h.io, backend->acquire(kKey, spec));
    EXPECT_EQ(sandbox->base_directory(), "/maf-sandbox/work");
}

TEST(AcasStorageBase, AWorkDirThatIsNotANormalisedAbsolutePathIsRefusedBeforeAnyRequest) {
    Harness h;
    auto backend = h.backend();
    for (const std::string dir : {"relative/base", "/a/../b", "/", "/a/", ""}) {
        EXPECT_THROW(
            drive(h.io, backend->acquire(kKey, h.spec([&](auto& f) { f.work_dir = dir; }))),
            InvalidArgument)
            << dir;
    }
    EXPECT_EQ(h.service.requests(), 0u);
}

TEST(AcasStorageBase, RelativeWorkingDirectoriesResolveBeneathTheBaseAndDotNamesIt) {
    Harness h;
    auto backend = h.backend();
    auto sandbox = drive(h.io, backend->acquire(kKey, h.spec()));
    const auto base = sandbox->base_directory();
    fs::create_directories(fs::path(base) / "sub");
    const auto pwd = [&](std::string wd) {
        ExecRequest request;
        request.command = Argv{"pwd", "-P"};
        request.working_directory = std::move(wd);
        return drive(h.io, sandbox->exec(request)).stdout_text();
    };
    const auto real_base = fs::canonical(base).string();
    EXPECT_EQ(pwd("."), real_base + "\n");
    EXPECT_EQ(pwd(""), real_base + "\n");
    EXPECT_EQ(pwd("sub"), real_base + "/sub\n");
    // The command and argv themselves are untouched: a relative argument stays relative.
    ExecRequest request;
    request.command = Argv{"ls", "-d", "sub"};
    EXPECT_EQ(drive(h.io, sandbox->exec(request)).stdout_text(), "sub\n");
}

}  // namespace
}  // namespace maf_sandbox::acas
