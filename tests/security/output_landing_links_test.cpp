// Output landing as an attack surface (issue 17): artifact names come from a sandbox's spec and
// its bytes from the guest, the landing directory is the host's. Whatever links sit in the landing
// directory (absolute, relative climbing, into /proc, dangling, swapped in while the landing runs),
// a landing never writes, creates or changes anything outside it. Victims are files in this test's
// own temporary directory; every case lands a normal name first.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <linux/fs.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <thread>

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

class OutputLandingLinks : public ::testing::Test {
  protected:
    void SetUp() override {
        std::string pattern = (fs::temp_directory_path() / "maf-landing-XXXXXX").string();
        ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
        base = pattern;
        out = base / "out";
        victims = base / "victims";
        fs::create_directories(out);
        fs::create_directories(victims / "dir");
        std::ofstream(victims / "victim.txt") << "host victim";
        ::chmod((victims / "victim.txt").c_str(), 0600);
        ::chmod((victims / "dir").c_str(), 0700);
        // The control: a normal nested name lands.
        const auto landed = land_bytes_beneath(out, "ok/nested/report.txt", "report");
        EXPECT_EQ(read_all(out / "ok/nested/report.txt"), "report");
        EXPECT_EQ(landed, out / "ok/nested/report.txt");
    }
    void TearDown() override { fs::remove_all(base); }

    void expect_victims_untouched() {
        EXPECT_EQ(read_all(victims / "victim.txt"), "host victim");
        struct stat st {};
        ASSERT_EQ(::stat((victims / "victim.txt").c_str(), &st), 0);
        EXPECT_EQ(st.st_mode & 07777, 0600u);
        ASSERT_EQ(::stat((victims / "dir").c_str(), &st), 0);
        EXPECT_EQ(st.st_mode & 07777, 0700u);
        EXPECT_TRUE(fs::is_empty(victims / "dir"));
    }

    void expect_refused(const std::string& name) {
        EXPECT_THROW(land_bytes_beneath(out, name, "pwned"), SandboxLandingNotConfined) << name;
        expect_victims_untouched();
    }

    fs::path base, out, victims;
};

TEST_F(OutputLandingLinks, AnAbsoluteLinkInTheLandingDirectoryIsNeverFollowed) {
    fs::create_symlink(victims / "dir", out / "abs");
    fs::create_symlink(victims / "victim.txt", out / "absfile");
    expect_refused("abs/x.txt");
    expect_refused("abs/deeper/x.txt");
    // A final link is replaced by the artifact, never written through.
    land_bytes_beneath(out, "absfile", "landed");
    EXPECT_FALSE(fs::is_symlink(out / "absfile"));
    EXPECT_EQ(read_all(out / "absfile"), "landed");
    expect_victims_untouched();
}

TEST_F(OutputLandingLinks, ARelativeClimbingLinkIsNeverFollowed) {
    fs::create_symlink("../victims/dir", out / "rel");
    fs::create_directories(out / "a");
    fs::create_symlink("../../../../../../../../" + victims.relative_path().string() + "/dir",
                       out / "a" / "climb");
    expect_refused("rel/x.txt");
    expect_refused("a/climb/x.txt");
}

TEST_F(OutputLandingLinks, LinksIntoProcAndDanglingLinksAreNeverFollowed) {
    fs::create_symlink("/proc/self", out / "proc");
    fs::create_symlink(victims / "never", out / "dangling");
    expect_refused("proc/comm");
    expect_refused("dangling/x.txt");
    EXPECT_FALSE(fs::exists(victims / "never"));
}

TEST_F(OutputLandingLinks, AHardLinkToAHostFileIsReplacedNotWrittenThrough) {
    fs::create_hard_link(victims / "victim.txt", out / "hard.txt");
    land_bytes_beneath(out, "hard.txt", "landed");
    EXPECT_EQ(read_all(out / "hard.txt"), "landed");
    expect_victims_untouched();
}

TEST_F(OutputLandingLinks, TheFileSystemSinkRefusesThroughALink) {
    fs::create_symlink(victims / "dir", out / "abs");
    auto sink = make_file_system_sink(out);
    EXPECT_THROW(run_blocking(sink.deliver(Artifact{"abs/x.txt", "pwned", "probe", {}})),
                 SandboxLandingNotConfined);
    expect_victims_untouched();
    const auto landed = run_blocking(sink.deliver(Artifact{"fine/x.txt", "ok", "probe", {}}));
    EXPECT_EQ(read_all(out / "fine/x.txt"), "ok");
}

// Another process swaps a real directory and a link to the victims (RENAME_EXCHANGE) as fast as
// it can while artifacts land under the directory's name.
TEST_F(OutputLandingLinks, ALinkSwappedInWhileLandingGainsNothing) {
    fs::create_directories(out / "d");
    fs::create_symlink(victims / "dir", out / "l");
    std::atomic<bool> stop{false};
    std::atomic<long> swaps{0};
    std::thread swapper([&] {
        const auto a = (out / "d").string();
        const auto b = (out / "l").string();
        while (!stop) {
            if (::syscall(SYS_renameat2, AT_FDCWD, a.c_str(), AT_FDCWD, b.c_str(),
                          RENAME_EXCHANGE) == 0) {
                ++swaps;
            }
        }
    });
    int landed = 0;
    int refused = 0;
    for (int i = 0; i < 3000; ++i) {
        try {
            land_bytes_beneath(out, "d/sub/x" + std::to_string(i % 7) + ".txt", "pwned");
            ++landed;
        } catch (const SandboxLandingNotConfined&) {
            ++refused;
        } catch (const SandboxOutputError&) {
            ++refused;  // a component vanished mid-swap
        }
    }
    stop = true;
    swapper.join();
    EXPECT_GT(swaps.load(), 0);
    EXPECT_GT(landed + refused, 0);
    expect_victims_untouched();
}

}  // namespace
}  // namespace maf_sandbox
