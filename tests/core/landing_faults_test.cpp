// Landing on a host file system that fails (issue 27 item 3): a full or read-only file system
// makes land_bytes_beneath and the file-system sink throw SandboxOutputError with the reason, and
// the name keeps what it held, never a part of the new file, with no staged sibling left over.
// Each case mounts its own small tmpfs in its own temporary directory (root only; skipped
// otherwise) and unmounts it.
#include <gtest/gtest.h>
#include <sys/mount.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "maf_sandbox/core/errors.hpp"
#include "maf_sandbox/core/outputs.hpp"
#include "maf_sandbox/core/run_blocking.hpp"

namespace maf_sandbox {
namespace {

namespace fs = std::filesystem;

std::string read_all(const fs::path& path) {
    std::ifstream in(path, std::ios::binary);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

std::vector<std::string> names_in(const fs::path& dir) {
    std::vector<std::string> names;
    for (const auto& entry : fs::directory_iterator(dir)) {
        names.push_back(entry.path().filename().string());
    }
    std::sort(names.begin(), names.end());
    return names;
}

class LandingFaults : public ::testing::Test {
  protected:
    void SetUp() override {
        std::string pattern = (fs::temp_directory_path() / "maf-landing-faults-XXXXXX").string();
        ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
        base_ = pattern;
        dir_ = base_ / "mnt";
        fs::create_directories(dir_);
    }
    void TearDown() override {
        if (mounted_) {
            ::umount2(dir_.c_str(), MNT_DETACH);
        }
        fs::remove_all(base_);
    }
    // A tmpfs of `size` at dir_, holding `old` as report.txt, then remounted with `flags`.
    void mount_tmpfs(const std::string& size, unsigned long flags = 0) {
        const auto options = "size=" + size;
        if (::mount("maf-landing-test", dir_.c_str(), "tmpfs", 0, options.c_str()) != 0) {
            GTEST_SKIP() << "cannot mount a tmpfs (" << std::strerror(errno) << "): needs root";
        }
        mounted_ = true;
        std::ofstream(dir_ / "report.txt", std::ios::binary) << "old report";
        if (flags != 0) {
            ASSERT_EQ(::mount(nullptr, dir_.c_str(), nullptr, MS_REMOUNT | flags, options.c_str()),
                      0)
                << std::strerror(errno);
        }
    }
    void expect_old_report_whole() {
        EXPECT_EQ(names_in(dir_), std::vector<std::string>{"report.txt"})
            << "a staged or partial file was left";
        EXPECT_EQ(read_all(dir_ / "report.txt"), "old report");
    }

    fs::path base_;
    fs::path dir_;
    bool mounted_ = false;
};

TEST_F(LandingFaults, AFullFileSystemFailsNamingTheReasonAndKeepsTheOldFileWhole) {
    mount_tmpfs("64k");
    if (IsSkipped()) {
        return;
    }
    const std::string content(1 << 20, 'x');
    try {
        land_bytes_beneath(dir_, "report.txt", content);
        FAIL() << "1 MiB landed on a 64 KiB file system";
    } catch (const SandboxOutputError& e) {
        EXPECT_NE(std::string(e.what()).find(std::strerror(ENOSPC)), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("report.txt"), std::string::npos) << e.what();
    }
    expect_old_report_whole();
    // The control: what fits lands whole over the old file.
    land_bytes_beneath(dir_, "report.txt", "new report");
    EXPECT_EQ(read_all(dir_ / "report.txt"), "new report");
}

TEST_F(LandingFaults, TheFileSystemSinkFailsOnAFullFileSystem) {
    mount_tmpfs("64k");
    if (IsSkipped()) {
        return;
    }
    auto sink = make_file_system_sink(dir_);
    Artifact artifact{"report.txt", std::string(1 << 20, 'x'), "test", std::nullopt};
    EXPECT_THROW(run_blocking(sink.deliver(std::move(artifact))), SandboxOutputError);
    expect_old_report_whole();
}

TEST_F(LandingFaults, AReadOnlyFileSystemFailsNamingTheReason) {
    mount_tmpfs("1m", MS_RDONLY);
    if (IsSkipped()) {
        return;
    }
    try {
        land_bytes_beneath(dir_, "report.txt", "new report");
        FAIL() << "landed on a read-only file system";
    } catch (const SandboxOutputError& e) {
        EXPECT_NE(std::string(e.what()).find(std::strerror(EROFS)), std::string::npos) << e.what();
    }
    expect_old_report_whole();
}

TEST_F(LandingFaults, AMissingParentThatCannotBeCreatedFailsNamingTheReason) {
    mount_tmpfs("1m", MS_RDONLY);
    if (IsSkipped()) {
        return;
    }
    // The landing directory itself below a read-only mount: it is created when missing, so its
    // creation failing is reported, not left to a later open's stale errno.
    EXPECT_THROW(land_bytes_beneath(dir_ / "new-root", "report.txt", "x"), SandboxOutputError);
    expect_old_report_whole();
}

}  // namespace
}  // namespace maf_sandbox
