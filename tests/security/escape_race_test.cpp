// The swap race: while a guest loop exchanges a name between a real file or directory and a
// symlink to a host path (renameat2 RENAME_EXCHANGE, thousands of times a second), the host reads,
// stats, lists, writes and removes through that name for a few seconds. Resolution with
// openat2(RESOLVE_IN_ROOT | RESOLVE_NO_SYMLINKS) makes check-and-use one kernel step, so each call
// either sees the guest's own entry or is refused: never an outside byte, entry or change.
#include <gtest/gtest.h>

#include <atomic>
#include <functional>
#include <thread>

#include "security_fixture.hpp"

namespace maf_sandbox::security {
namespace {

constexpr const char* kSwapSeconds = "2.5";

class SwapRace : public ::testing::Test {
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
        dir_ = ::testing::UnitTest::GetInstance()->current_test_info()->name();
        // `d` is a real directory holding a 3-byte victim, `dl` a link to the host's victim
        // directory; `f` a real file, `fl` a link to the host's secret. The guest swaps each pair.
        const auto made = box_->sh(
            fmt::format("mkdir -p {0}/d && cd {0} && printf in > d/victim && printf x > d/x && "
                        "printf inside > f && ln -s {1} dl && ln -s {2} fl",
                        dir_, outside_->victim_dir.string(), outside_->secret.string()));
        ASSERT_EQ(made.exit_code, 0) << made.stderr_bytes;
    }
    void TearDown() override { EXPECT_TRUE(outside_->intact()) << "a host file was touched"; }

    // Runs `attempt` on the host in a loop while the guest swaps both pairs; counts the calls that
    // succeeded and those that were refused (both must happen, or the race was not a race).
    void race(const std::function<void()>& attempt) {
        std::atomic<bool> done{false};
        std::string swaps;
        std::thread guest([&] {
            const auto result = box_->sh(
                fmt::format("cd {0} && {1} swap d dl {2} & cd {0} && {1} swap f fl {2}; wait", dir_,
                            kProbe, kSwapSeconds));
            swaps = result.stdout_bytes;
            done = true;
        });
        while (!done) {
            try {
                attempt();
                ++succeeded_;
            } catch (const Error&) {
                ++refused_;
            }
        }
        guest.join();
        EXPECT_NE(swaps.find("swaps"), std::string::npos) << swaps;
        EXPECT_GT(succeeded_, 0) << "no call saw the guest's own entry";
        EXPECT_GT(refused_, 0) << "no call met the link: the race never happened";
        std::printf("[ race ] %d host calls succeeded, %d refused; guest: %s", succeeded_, refused_,
                    swaps.c_str());
    }
    std::string at(const std::string& name) const { return dir_ + "/" + name; }

    static Outside* outside_;
    static Box* box_;
    std::string dir_;
    int succeeded_ = 0;
    int refused_ = 0;
};
Outside* SwapRace::outside_ = nullptr;
Box* SwapRace::box_ = nullptr;

TEST_F(SwapRace, ReadsDuringTheSwapNeverReturnHostBytes) {
    race([&] {
        const auto file = api_read(*box_, at("f"));
        ASSERT_EQ(file, "inside");
        const auto victim = api_read(*box_, at("d/victim"));
        ASSERT_EQ(victim, "in");
    });
}

TEST_F(SwapRace, StatsDuringTheSwapNeverDescribeAHostFile) {
    race([&] {
        const auto victim = api_stat(*box_, at("d/victim"));
        ASSERT_TRUE(victim);
        ASSERT_EQ(victim->size_bytes, std::optional<std::uint64_t>(2));
        const auto file = api_stat(*box_, at("f"));
        ASSERT_TRUE(file);
        // The link itself may be described (as a link); a host file's size never.
        ASSERT_NE(file->size_bytes, std::optional<std::uint64_t>(outside_->marker.size()));
    });
}

TEST_F(SwapRace, ListingsDuringTheSwapNeverNameAHostEntry) {
    race([&] {
        const auto entries = api_list(*box_, at("d"));
        for (const auto& entry : entries) {
            ASSERT_EQ(entry.path.find("host-only-name"), std::string::npos);
        }
        ASSERT_EQ(entries.size(), 2u);
    });
}

TEST_F(SwapRace, WritesAndRemovesDuringTheSwapNeverReachTheHost) {
    race([&] {
        api_write(*box_, at("d/victim"), "in");
        api_write(*box_, at("d/planted"), "p");
        api_remove(*box_, at("d/planted"));
        api_remove(*box_, at("d/victim"));
        api_write(*box_, at("d/victim"), "in");
    });
}

TEST_F(SwapRace, GuestFsLayerDuringTheSwapNeverReachesTheHost) {
    const auto fs = box_->guest_fs();
    const std::string base = std::string(kWork) + "/" + dir_;
    race([&] {
        ASSERT_EQ(fs.read(base + "/f", 1 << 20), "inside");
        const auto listed = fs.list(base + "/d");
        for (const auto& entry : listed) {
            ASSERT_NE(entry.name, "host-only-name");
        }
        const auto victim = fs.stat(base + "/d/victim");
        ASSERT_TRUE(!victim || victim->size_bytes != outside_->victim_content.size());
        fs.write(base + "/d/planted", "p");
        fs.remove(base + "/d/planted", false);
    });
}

}  // namespace
}  // namespace maf_sandbox::security
