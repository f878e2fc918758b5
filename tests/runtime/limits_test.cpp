// Limits and the exec contract: memory, pids, output cap with constant memory, timeouts that kill
// the whole tree, background processes that outlive a normal finish, exit code fidelity.
#include <gtest/gtest.h>
#include <spawn.h>
#include <sys/wait.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <thread>

#include "sandbox_fixture.hpp"

namespace maf_sandbox::runtime::testing {
namespace {

using namespace std::chrono_literals;

std::uint64_t own_rss_kib() {
    std::ifstream status("/proc/self/status");
    std::string line;
    while (std::getline(status, line)) {
        if (line.starts_with("VmRSS:")) {
            return std::stoull(line.substr(6));
        }
    }
    return 0;
}

// Counts the guest's processes named `comm`.
int count_named(const ScopedSandbox& sandbox, const std::string& comm) {
    const auto reply =
        sandbox.sh(fmt::format("grep -lx {} /proc/[0-9]*/comm 2>/dev/null | wc -l", comm));
    return std::stoi(reply.stdout_head);
}

TEST(Limits, ExitCodesAreFaithfulAndSignalsRead128PlusN) {
    StateDir state;
    ScopedSandbox sandbox(host_launch(state.path(), unique_id()));
    EXPECT_EQ(sandbox.sh("exit 42").exit_code, 42);
    EXPECT_EQ(sandbox.sh("kill -9 $$").exit_code, 137);
    EXPECT_EQ(sandbox.sh("kill -TERM $$").exit_code, 143);
    EXPECT_EQ(sandbox.sh("no-such-program-here").exit_code, 127);
    ExecCall call;
    call.command = std::vector<std::string>{"cat"};
    call.stdin_bytes = std::string("line one\n\0binary", 16);
    const auto reply = exec_in_sandbox(sandbox.handle(), call);
    EXPECT_EQ(reply.stdout_head, call.stdin_bytes);
}

TEST(Limits, AllocationOverTheMemoryLimitIsKilledAndReported) {
    StateDir state;
    auto launch = host_launch(state.path(), unique_id());
    launch.limits.memory_bytes = 256ull << 20;
    ScopedSandbox sandbox(launch);
    const auto reply =
        sandbox.sh("/usr/bin/python3 -c 'b = bytearray(2 * 1024**3); print(len(b))'", 60s);
    EXPECT_EQ(reply.status, ExecStatus::exited);
    EXPECT_EQ(reply.exit_code, 137) << reply.stderr_head;
    EXPECT_GE(reply.oom_kills, 1u);
    EXPECT_EQ(reply.stdout_head, "");
    // The sandbox survives its program's OOM kill.
    EXPECT_EQ(sandbox.sh("echo alive").stdout_head, "alive\n");
}

TEST(Limits, ForkBombIsContainedAndTheHostStaysResponsive) {
    StateDir state;
    auto launch = host_launch(state.path(), unique_id());
    launch.limits.pids = 64;
    ScopedSandbox sandbox(launch);
    std::atomic<bool> done{false};
    std::chrono::milliseconds worst{0};
    std::thread probe([&] {
        while (!done) {
            const auto start = std::chrono::steady_clock::now();
            pid_t pid = 0;
            char* argv[] = {const_cast<char*>("/bin/true"), nullptr};
            if (::posix_spawn(&pid, "/bin/true", nullptr, nullptr, argv, nullptr) == 0) {
                ::waitpid(pid, nullptr, 0);
            }
            worst = std::max(worst, std::chrono::duration_cast<std::chrono::milliseconds>(
                                        std::chrono::steady_clock::now() - start));
            std::this_thread::sleep_for(50ms);
        }
    });
    // The bomb runs in a subshell forked first; the shell then becomes `sleep` without forking,
    // so a pid limit the bomb has used up cannot end the command early (it must time out).
    const auto reply = sandbox.sh("(bomb() { bomb | bomb & }; bomb) & exec sleep 10", 3s);
    done = true;
    probe.join();
    EXPECT_EQ(reply.status, ExecStatus::timed_out);
    EXPECT_LT(worst, 2500ms) << "spawning on the host took " << worst.count()
                             << " ms during the bomb";
    const auto pids = sandbox.sh("cat /proc/[0-9]*/comm | wc -l");
    // PID 1, the exec's handler and shell, cat, wc, and up to two spare handlers with their
    // prepared guests: 9 at most. The bomb's processes would be dozens.
    EXPECT_LT(std::stoi(pids.stdout_head), 10) << "the bomb's processes survived the timeout";
}

TEST(Limits, OutputOverTheCapIsDrainedCountedAndNeverBuffered) {
    StateDir state;
    ScopedSandbox sandbox(host_launch(state.path(), unique_id()));
    const auto rss_before = own_rss_kib();
    const auto reply = sandbox.sh("timeout 10 yes", 30s, 1 << 20);
    const auto rss_after = own_rss_kib();
    EXPECT_EQ(reply.status, ExecStatus::exited);
    EXPECT_EQ(reply.exit_code, 124);  // timeout(1)'s status: `yes` ran the full 10 seconds
    EXPECT_EQ(reply.stdout_head.size(), 1u << 20);
    EXPECT_GT(reply.stdout_total, 16u << 20) << "yes should write far more than the cap in 10 s";
    EXPECT_TRUE(reply.truncated());
    EXPECT_LT(rss_after, rss_before + 8 * 1024)
        << "host memory grew by " << (rss_after - rss_before) << " KiB";
}

TEST(Limits, TimeoutKillsTheWholeTreeIncludingSetsidAndDoubleForkedChildren) {
    StateDir state;
    ScopedSandbox sandbox(host_launch(state.path(), unique_id()));
    const auto reply = sandbox.sh(
        "setsid sh -c 'sleep 1000' & (sleep 1000 &); nohup sleep 1000 >/dev/null 2>&1 & sleep 1000",
        1s);
    EXPECT_EQ(reply.status, ExecStatus::timed_out);
    EXPECT_EQ(count_named(sandbox, "sleep"), 0);
}

TEST(Limits, BackgroundProcessOutlivesANormalFinishAndIsSeenByTheNextExec) {
    StateDir state;
    ScopedSandbox sandbox(host_launch(state.path(), unique_id()));
    const auto start = sandbox.sh("(sleep 1000 >/dev/null 2>&1 &); echo started", 5s);
    EXPECT_EQ(start.status, ExecStatus::exited);
    EXPECT_EQ(start.stdout_head, "started\n");
    EXPECT_EQ(count_named(sandbox, "sleep"), 1);
    // A background process still holding the pipes does not hold the exec hostage either.
    const auto held = sandbox.sh("sleep 1000 & echo held", 5s);
    EXPECT_EQ(held.status, ExecStatus::exited);
    EXPECT_EQ(held.stdout_head, "held\n");
    EXPECT_EQ(count_named(sandbox, "sleep"), 2);
}

TEST(Limits, WritableLayerIsLimitedByTheDiskSize) {
    StateDir state;
    auto launch = host_launch(state.path(), unique_id());
    launch.mounts.disk_bytes = 16ull << 20;
    ScopedSandbox sandbox(launch);
    const auto reply = sandbox.sh("head -c 32M /dev/zero > /maf-sandbox/work/big; echo $?", 30s);
    EXPECT_NE(reply.stderr_head.find("No space left on device"), std::string::npos)
        << reply.stderr_head;
}

TEST(Limits, CpuQuotaIsWritten) {
    StateDir state;
    auto launch = host_launch(state.path(), unique_id());
    launch.limits.cpus = 0.5;
    ScopedSandbox sandbox(launch);
    bool found = false;
    for (const auto& path : sandbox.handle().cgroups) {
        if (std::filesystem::exists(path / "cpu.cfs_quota_us")) {
            std::ifstream in(path / "cpu.cfs_quota_us");
            long quota = 0;
            in >> quota;
            EXPECT_EQ(quota, 50000);
            found = true;
        }
    }
    EXPECT_TRUE(found || detect_cgroup_layout() == CgroupLayout::v2);
}

}  // namespace
}  // namespace maf_sandbox::runtime::testing
