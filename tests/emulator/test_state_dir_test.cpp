// An emulator that exits leaves its sandboxes running, by design: its next start reattaches to
// them (docs/emulator.md). A test's state directory therefore ends, with the directory, every
// sandbox recorded beneath it, so that a test which fails before it deletes, or whose deletions
// are still running when its emulator is stopped, leaves no sandbox on the host.
#include <filesystem>
#include <fstream>

#include "emulator_fixture.hpp"
#include "polling.hpp"

namespace maf_sandbox::emulator::testing {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

// The sandbox's pids cgroup (v1) or its unified one (v2), by the runtime's name for it.
fs::path cgroup_of(const std::string& sandbox_id) {
    std::string hex;
    for (const char c : sandbox_id) {
        if (c != '-') {
            hex.push_back(c);
        }
    }
    const fs::path v1 = fs::path("/sys/fs/cgroup/pids") / ("maf-sbx-" + hex);
    return fs::exists(v1) ? v1 : fs::path("/sys/fs/cgroup") / ("maf-sbx-" + hex);
}

bool runs(const fs::path& cgroup) {
    std::ifstream procs(cgroup / "cgroup.procs");
    std::string pid;
    return static_cast<bool>(procs >> pid);
}

TEST(EmulatorTestStateDir, ASandboxAnExitedEmulatorLeftRunningEndsWithTheTestsStateDir) {
    fs::path cgroup;
    {
        TempDir dir;
        boost::asio::io_context io;
        std::string id;
        {
            EmulatorProcess emulator(dir.path());
            SdkClient sdk(io, dir.path() / "ca.pem", emulator.base_url());
            id = sdk.create();
            sdk.wait_for_state(id, "Running");
        }
        cgroup = cgroup_of(id);
        // Control: the emulator is gone and its sandbox still runs, as it is meant to.
        ASSERT_TRUE(runs(cgroup)) << cgroup;
    }
    EXPECT_TRUE(maf_sandbox::testing::poll_until([&] { return !fs::exists(cgroup); }, 30s, 50ms))
        << "the sandbox outlived its test's state directory: " << cgroup;
}

}  // namespace
}  // namespace maf_sandbox::emulator::testing
