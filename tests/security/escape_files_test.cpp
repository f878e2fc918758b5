// Escapes through the file API: a guest plants symlinks and hardlinks aimed at host paths, then
// the host reads, writes, stats, lists and removes through the Sandbox API and the GuestFs layer.
// Every case proves the same two things: nothing outside is returned, and nothing outside changes.
#include <gtest/gtest.h>

#include "security_fixture.hpp"

namespace maf_sandbox::security {
namespace {

using namespace std::chrono_literals;

class FileEscape : public ::testing::Test {
  protected:
    static void SetUpTestSuite() {
        outside_ = new Outside();
        box_ = new Box();
    }
    static void TearDownTestSuite() {
        delete box_;
        delete outside_;
    }
    void SetUp() override {
        // Each case works in its own directory below the working directory.
        dir_ = ::testing::UnitTest::GetInstance()->current_test_info()->name();
        const auto made = box_->sh("mkdir -p " + dir_);
        ASSERT_EQ(made.exit_code, 0) << made.stderr_bytes;
    }
    void TearDown() override { EXPECT_TRUE(outside_->intact()) << "a host file was touched"; }

    // Runs a guest shell line in the case's directory.
    void guest(const std::string& script) {
        const auto result = box_->sh("cd " + dir_ + " && " + script);
        ASSERT_EQ(result.exit_code, 0) << script << ": " << result.stderr_bytes;
    }
    std::string at(const std::string& name) const { return dir_ + "/" + name; }

    static Outside* outside_;
    static Box* box_;
    std::string dir_;
};
Outside* FileEscape::outside_ = nullptr;
Box* FileEscape::box_ = nullptr;

// --- read ---------------------------------------------------------------------------------------

TEST_F(FileEscape, ReadOfAFinalSymlinkToAHostFileIsRefused) {
    guest("ln -s " + outside_->secret.string() + " link");
    EXPECT_THROW(api_read(*box_, at("link")), FileError);
}

TEST_F(FileEscape, ReadThroughASymlinkedParentToAHostDirectoryIsRefused) {
    guest("ln -s " + outside_->victim_dir.string() + " dir");
    EXPECT_THROW(api_read(*box_, at("dir/victim")), ConfinementEscape);
}

TEST_F(FileEscape, ReadThroughARelativeLinkClimbingOutOfTheRootIsRefused) {
    guest("ln -s ../../../../../../../../.." + outside_->dir.path().string() + " up");
    EXPECT_THROW(api_read(*box_, at("up/secret.txt")), ConfinementEscape);
}

TEST_F(FileEscape, ReadThroughAProcSelfRootMagicLinkIsRefused) {
    guest("ln -s /proc/self/root" + outside_->secret.string() + " magic");
    EXPECT_THROW(api_read(*box_, at("magic")), FileError);
    guest("ln -s /proc/self/root/ rootlink");
    EXPECT_THROW(api_read(*box_, at("rootlink") + outside_->secret.string()), ConfinementEscape);
}

TEST_F(FileEscape, ReadOfProcOneRootPathsIsRefusedEvenWithTheRootAsWorkingDirectory) {
    // /proc/1/root and /proc/self/root are magic links: never followed, whatever the caller asks.
    const std::vector<std::string> paths{"/proc/1/root" + outside_->secret.string(),
                                         "/proc/self/root" + outside_->secret.string(),
                                         "/proc/1/root/etc/hostname", "/proc/1/cwd/etc/hostname"};
    for (const auto& path : paths) {
        EXPECT_THROW(api_read(*box_, path, "/"), Error) << path;
    }
}

TEST_F(FileEscape, ReadOfAHardLinkReturnsOnlyTheGuestsOwnFile) {
    guest("echo inside > mine && ln mine hard");
    EXPECT_EQ(api_read(*box_, at("hard")), "inside\n");
    // Hard links to what the guest does not own or cannot write are refused by the kernel
    // (protected_hardlinks), and links across mounts (the host's /usr) by EXDEV.
    EXPECT_EQ(box_->errno_of({"link", "/etc/passwd", at("passwd")}), EPERM);
    EXPECT_EQ(box_->errno_of({"link", "/usr/bin/env", at("env")}), EXDEV);
}

TEST_F(FileEscape, ReadOfAFifoPlantedByTheGuestIsRefusedWithoutBlocking) {
    guest("mkfifo pipe");
    const auto started = std::chrono::steady_clock::now();
    EXPECT_THROW(api_read(*box_, at("pipe")), FileError);
    EXPECT_LT(std::chrono::steady_clock::now() - started, 5s);
}

// --- write --------------------------------------------------------------------------------------

TEST_F(FileEscape, WriteToAFinalSymlinkToAHostFileIsRefused) {
    guest("ln -s " + outside_->secret.string() + " link");
    EXPECT_THROW(api_write(*box_, at("link"), "overwritten"), ConfinementEscape);
}

TEST_F(FileEscape, WriteThroughASymlinkedParentIsRefused) {
    guest("ln -s " + outside_->victim_dir.string() + " dir");
    EXPECT_THROW(api_write(*box_, at("dir/victim"), "overwritten"), ConfinementEscape);
    EXPECT_THROW(api_write(*box_, at("dir/new-file"), "planted"), ConfinementEscape);
}

TEST_F(FileEscape, WriteOverAHardLinkReplacesTheNameNotTheLinkedFile) {
    guest("echo original > a && ln a b");
    api_write(*box_, at("b"), "replaced");
    EXPECT_EQ(api_read(*box_, at("a")), "original\n");
    EXPECT_EQ(api_read(*box_, at("b")), "replaced");
}

TEST_F(FileEscape, WriteCreatingParentsThroughALinkedAncestorIsRefused) {
    guest("ln -s " + outside_->dir.path().string() + " out");
    EXPECT_THROW(api_write(*box_, at("out/new/deeper/file"), "planted"), ConfinementEscape);
    EXPECT_FALSE(fs::exists(outside_->dir.path() / "new"));
}

// --- stat / exists ------------------------------------------------------------------------------

TEST_F(FileEscape, StatOfASymlinkDescribesTheLinkNotTheHostFile) {
    guest("ln -s " + outside_->victim.string() + " link");
    const auto entry = api_stat(*box_, at("link"));
    ASSERT_TRUE(entry);
    EXPECT_EQ(entry->kind, EntryKind::symlink);
    EXPECT_FALSE(entry->size_bytes);
}

TEST_F(FileEscape, StatThroughASymlinkedParentIsRefusedNotReportedAbsentOrPresent) {
    guest("ln -s " + outside_->victim_dir.string() + " dir");
    EXPECT_THROW(api_stat(*box_, at("dir/victim")), ConfinementEscape);
    EXPECT_THROW(api_stat(*box_, at("dir/missing")), ConfinementEscape);
}

// --- list ---------------------------------------------------------------------------------------

TEST_F(FileEscape, ListOfASymlinkToAHostDirectoryIsRefused) {
    guest("ln -s " + outside_->victim_dir.string() + " dir");
    EXPECT_THROW(api_list(*box_, at("dir")), ConfinementEscape);
}

TEST_F(FileEscape, ListThroughASymlinkedParentIsRefused) {
    guest("ln -s " + outside_->dir.path().string() + " out");
    EXPECT_THROW(api_list(*box_, at("out/victims")), ConfinementEscape);
}

TEST_F(FileEscape, ListReportsLinksAsLinksAndNeverDescribesTheirTargets) {
    guest("ln -s " + outside_->victim.string() + " file-link && ln -s " +
          outside_->victim_dir.string() + " dir-link");
    const auto entries = api_list(*box_, dir_);
    ASSERT_EQ(entries.size(), 2u);
    for (const auto& entry : entries) {
        EXPECT_EQ(entry.kind, EntryKind::symlink) << entry.path;
        EXPECT_FALSE(entry.size_bytes) << entry.path;
    }
}

// --- remove -------------------------------------------------------------------------------------

TEST_F(FileEscape, RemoveOfASymlinkToAHostFileUnlinksOnlyTheLink) {
    guest("ln -s " + outside_->victim.string() + " link");
    api_remove(*box_, at("link"));
    EXPECT_FALSE(api_stat(*box_, at("link")));
}

TEST_F(FileEscape, RemoveThroughASymlinkedParentIsRefused) {
    guest("ln -s " + outside_->victim_dir.string() + " dir");
    EXPECT_THROW(api_remove(*box_, at("dir/victim")), ConfinementEscape);
}

TEST_F(FileEscape, RecursiveRemoveNeverEntersALinkToAHostDirectory) {
    guest("mkdir -p tree/a/b && ln -s " + outside_->victim_dir.string() +
          " tree/a/b/out && ln -s " + outside_->dir.path().string() + " tree/top");
    api_remove(*box_, at("tree"), /*recursive=*/true);
    EXPECT_FALSE(api_stat(*box_, at("tree")));
}

TEST_F(FileEscape, RecursiveRemoveOfASymlinkToAHostDirectoryRemovesOnlyTheLink) {
    guest("ln -s " + outside_->victim_dir.string() + " link");
    api_remove(*box_, at("link"), /*recursive=*/true);
    EXPECT_FALSE(api_stat(*box_, at("link")));
}

// --- the GuestFs layer, with no working-directory confinement above it --------------------------

TEST_F(FileEscape, GuestFsRefusesEveryOperationThroughALinkToTheHost) {
    guest("ln -s " + outside_->victim_dir.string() + " dir && ln -s " + outside_->secret.string() +
          " file");
    const auto fs = box_->guest_fs();
    const std::string base = std::string(kWork) + "/" + dir_;
    EXPECT_THROW(fs.read(base + "/file", 1 << 20), FileError);
    EXPECT_THROW(fs.read(base + "/dir/victim", 1 << 20), ConfinementEscape);
    EXPECT_THROW(fs.stat(base + "/dir/victim"), ConfinementEscape);
    EXPECT_THROW(fs.list(base + "/dir"), ConfinementEscape);
    EXPECT_THROW(fs.write(base + "/dir/victim", "x"), ConfinementEscape);
    EXPECT_THROW(fs.write(base + "/file", "x"), ConfinementEscape);
    EXPECT_THROW(fs.remove(base + "/dir/victim", false), ConfinementEscape);
    EXPECT_THROW(fs.mkdirs(base + "/dir/sub"), ConfinementEscape);
    fs.remove(base + "/dir", true);  // the link itself, never its target
    EXPECT_FALSE(fs.stat(base + "/dir"));
}

TEST_F(FileEscape, GuestFsNeverFollowsProcMagicLinks) {
    const auto fs = box_->guest_fs();
    const std::vector<std::string> paths{"/proc/self/root" + outside_->secret.string(),
                                         "/proc/1/root" + outside_->secret.string(),
                                         "/proc/1/cwd/etc/hostname", "/proc/1/fd/0"};
    for (const auto& path : paths) {
        EXPECT_THROW(fs.read(path, 1 << 20), Error) << path;
        EXPECT_THROW(fs.list(path), Error) << path;
    }
}

TEST_F(FileEscape, GuestFsDotDotAboveTheRootStopsAtTheSandboxRoot) {
    // `..` above the root collapses to the root, as in the guest's own kernel: the same path
    // inside the sandbox is what is read, never the host's.
    const auto secret = outside_->secret.string();
    const auto made = box_->sh(
        fmt::format("mkdir -p {} && printf guest > {}", outside_->dir.path().string(), secret));
    ASSERT_EQ(made.exit_code, 0) << made.stderr_bytes;
    const auto fs = box_->guest_fs();
    EXPECT_EQ(fs.read("/../../../../" + secret, 1 << 20), "guest");
    const auto entry = fs.stat("/.." + secret);
    ASSERT_TRUE(entry);
    EXPECT_EQ(entry->size_bytes, std::optional<std::uint64_t>(5));
    EXPECT_EQ(api_read(*box_, "../../../.." + secret, "/tmp"), "guest");
}

// --- writes to read-only image paths ------------------------------------------------------------

TEST_F(FileEscape, GuestWritesToReadOnlyImagePathsFail) {
    EXPECT_EQ(box_->errno_of({"open", "/usr/bin/planted", "41"}), EROFS);  // O_WRONLY|O_CREAT
    EXPECT_EQ(box_->errno_of({"open", "/usr/bin/env", "201"}), EROFS);     // O_WRONLY|O_TRUNC
    EXPECT_EQ(box_->errno_of({"open", "/etc/ssl/planted", "41"}), EROFS);
    EXPECT_EQ(box_->errno_of({"open", "/etc/passwd", "1"}), EACCES);  // the image's root owns it
    EXPECT_EQ(box_->errno_of({"mknod", "/dev/planted", "p"}), EROFS);
}

TEST_F(FileEscape, HostApiWritesToReadOnlyBindsAreRefusedAndTheHostIsUnchanged) {
    const auto before = slurp("/usr/bin/env");
    EXPECT_THROW(api_write(*box_, "/usr/bin/env", "overwritten", "/"), PermissionDenied);
    EXPECT_THROW(api_write(*box_, "/usr/bin/maf-planted", "planted", "/"), PermissionDenied);
    EXPECT_THROW(api_remove(*box_, "/usr/bin/env", false, "/"), PermissionDenied);
    EXPECT_EQ(slurp("/usr/bin/env"), before);
    EXPECT_FALSE(fs::exists("/usr/bin/maf-planted"));
}

TEST_F(FileEscape, HostApiWriteToAnImageFileChangesOnlyThisSandboxsLayer) {
    // The overlay's lower directory is the image on the host: a write lands in the upper layer.
    const auto lower = box_->state() / "images" / "host" / "rootfs" / "etc" / "passwd";
    const auto before = slurp(lower);
    ASSERT_FALSE(before.empty());
    const auto guest_before = api_read(*box_, "/etc/passwd", "/");
    api_write(*box_, "/etc/passwd", "changed\n", "/");
    EXPECT_EQ(api_read(*box_, "/etc/passwd", "/"), "changed\n");
    EXPECT_EQ(slurp(lower), before);
    api_write(*box_, "/etc/passwd", guest_before, "/");
}

}  // namespace
}  // namespace maf_sandbox::security
