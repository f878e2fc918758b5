// The per-sandbox bounds on the host's shared budgets (host_budgets.hpp): the file share formula,
// the pid budget, and the environment overrides.
#include "maf_sandbox/runtime/kernel/host_budgets.hpp"
#include "maf_sandbox/runtime/kernel/file_table_exposure.hpp"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>

#include "maf_sandbox/core/errors.hpp"
#include "maf_sandbox/runtime/egress/egress.hpp"

namespace maf_sandbox::runtime {
namespace {

TEST(HostBudgets, NofileTimesThePidsLimitIsAtMostTheFileShare) {
    const HostBudgets budgets;
    const std::uint64_t file_max = 2466112;  // this machine's
    const auto at_defaults = sandbox_budgets(budgets, 512, file_max, 32768);
    EXPECT_EQ(at_defaults.nofile, 481u);
    EXPECT_LE(at_defaults.nofile * 512, file_max / 10);
    EXPECT_EQ(at_defaults.sigpending, 4096u);
    EXPECT_EQ(at_defaults.msgqueue_bytes, 819200u);
    EXPECT_EQ(at_defaults.namespace_limits, budgets.namespace_limits);
    // Few processes: capped, never the whole share in one process.
    EXPECT_EQ(sandbox_budgets(budgets, 1, file_max, 32768).nofile, budgets.max_nofile);
}

TEST(HostBudgets, APidsLimitLeavingTooFewDescriptorsIsRefused) {
    const HostBudgets budgets;
    EXPECT_THROW(sandbox_budgets(budgets, 100000, 2466112, 4194304), SandboxCapacityExceeded);
    // No pids limit is charged as kernel.pid_max.
    EXPECT_THROW(sandbox_budgets(budgets, 0, 2466112, 4194304), SandboxCapacityExceeded);
    EXPECT_NO_THROW(sandbox_budgets(budgets, 0, 2466112, 1000));
}

TEST(HostBudgets, ThePidBudgetIsTheShareOfPidMax) {
    HostBudgets budgets;
    EXPECT_EQ(pid_budget(budgets, 32768), 24576u);
    budgets.pid_share_percent = 1;
    EXPECT_EQ(pid_budget(budgets, 32768), 327u);
}

TEST(HostBudgets, TheEgressProxysDescriptorsComeOutOfTheSameShare) {
    const HostBudgets budgets;
    const std::uint64_t file_max = 2466112;
    const std::uint64_t share = file_max / 100 * budgets.file_share_percent;
    const auto without = sandbox_budgets(budgets, 512, file_max, 32768);
    EXPECT_EQ(without.proxy_nofile, 0u);
    const auto with = sandbox_budgets(budgets, 512, file_max, 32768, true);
    EXPECT_EQ(with.proxy_nofile, budgets.proxy_nofile);
    // The guest divides what the proxy leaves: both together stay within the share.
    EXPECT_EQ(with.nofile, (share - budgets.proxy_nofile) / 512);
    EXPECT_LE(with.nofile * 512 + with.proxy_nofile, share);
    EXPECT_LE(with.nofile, without.nofile);
}

TEST(HostBudgets, TheProxyTakesAtMostHalfTheShareAndTooSmallAShareIsRefused) {
    HostBudgets budgets;
    budgets.proxy_nofile = 1u << 20;
    const std::uint64_t file_max = 100000;  // a share of 10000
    const auto budgets_of_small = sandbox_budgets(budgets, 10, file_max, 32768, true);
    EXPECT_EQ(budgets_of_small.proxy_nofile, 5000u);
    EXPECT_EQ(budgets_of_small.nofile, 500u);
    // A share whose half is below kMinNofile leaves the proxy too little: refused, not clamped.
    EXPECT_THROW(sandbox_budgets(budgets, 1, 1000, 32768, true), SandboxCapacityExceeded);
    EXPECT_NO_THROW(sandbox_budgets(budgets, 1, 1000, 32768, false));
}

TEST(HostBudgets, TheProxysLimitTravelsInTheConfigAndAnOlderConfigHasNone) {
    SandboxBudgets budgets;
    budgets.nofile = 400;
    budgets.proxy_nofile = 2048;
    EXPECT_EQ(SandboxBudgets::from_json(budgets.to_json()).proxy_nofile, 2048u);
    auto older = budgets.to_json();
    older.as_object().erase("proxy_nofile");
    EXPECT_EQ(SandboxBudgets::from_json(older).proxy_nofile, 0u);
}

TEST(HostBudgets, TheProxysSessionsFitItsDescriptorLimit) {
    for (const std::uint64_t nofile : {64u, 96u, 2048u, 20000u}) {
        const auto sessions = egress_sessions_within(nofile);
        EXPECT_GE(sessions, 1u);
        // Eight descriptors a session at most, and room left for the process's own.
        EXPECT_LE(sessions * 8 + 32, std::max<std::uint64_t>(nofile, 40)) << nofile;
    }
    EXPECT_EQ(egress_sessions_within(2048), 252u);
    EXPECT_EQ(egress_sessions_within(10), 1u);
}

TEST(HostBudgets, EnvironmentOverridesEachDefaultAndRefusesNonsense) {
    ::setenv("MAF_SANDBOX_PID_SHARE", "50", 1);
    ::setenv("MAF_SANDBOX_FILE_SHARE", "5", 1);
    ::setenv("MAF_SANDBOX_SIGPENDING", "1024", 1);
    ::setenv("MAF_SANDBOX_MSGQUEUE_BYTES", "4096", 1);
    ::setenv("MAF_SANDBOX_PROXY_NOFILE", "512", 1);
    const auto budgets = HostBudgets::from_environment();
    EXPECT_EQ(budgets.proxy_nofile, 512u);
    EXPECT_EQ(budgets.pid_share_percent, 50u);
    EXPECT_EQ(budgets.file_share_percent, 5u);
    EXPECT_EQ(budgets.sigpending, 1024u);
    EXPECT_EQ(budgets.msgqueue_bytes, 4096u);
    for (const char* bad : {"0", "101", "-5", "ten", "5%"}) {
        ::setenv("MAF_SANDBOX_PID_SHARE", bad, 1);
        EXPECT_THROW(HostBudgets::from_environment(), InvalidArgument) << bad;
    }
    ::setenv("MAF_SANDBOX_PID_SHARE", "50", 1);
    for (const char* bad : {"10", "0", "lots"}) {  // below kMinNofile, or no number
        ::setenv("MAF_SANDBOX_PROXY_NOFILE", bad, 1);
        EXPECT_THROW(HostBudgets::from_environment(), InvalidArgument) << bad;
    }
    for (const char* name :
         {"MAF_SANDBOX_PID_SHARE", "MAF_SANDBOX_FILE_SHARE", "MAF_SANDBOX_SIGPENDING",
          "MAF_SANDBOX_MSGQUEUE_BYTES", "MAF_SANDBOX_PROXY_NOFILE"}) {
        ::unsetenv(name);
    }
    EXPECT_EQ(HostBudgets::from_environment().pid_share_percent, HostBudgets{}.pid_share_percent);
}

TEST(HostBudgets, TheKernelsNumbersAreRead) {
    EXPECT_GT(read_kernel_number("/proc/sys/kernel/pid_max"), 300u);
    EXPECT_GT(read_kernel_number("/proc/sys/fs/file-max"), 1000u);
    EXPECT_THROW(read_kernel_number("/proc/sys/no/such"), SystemError);
}

// Mapped-then-closed files escape RLIMIT_NOFILE; memory is their bound, and the exposure says
// honestly whether that bound keeps a sandbox within its share of the file table.
TEST(HostBudgets, TheFileTableExposureSaysWhetherMemoryKeepsASandboxWithinItsShare) {
    const HostBudgets defaults;
    // Benign: a small sandbox on a host with this machine's file table is within its share.
    const auto small = file_table_exposure(defaults, 48ull << 20, 2466170);
    EXPECT_EQ(small.share_files, 246610u);
    EXPECT_EQ(small.held_by_memory, (48ull << 20) / kMinBytesPerHeldFile);
    EXPECT_TRUE(small.within_share()) << small.describe();
    // The default 1 GiB is not, and the sentence says what would fix it.
    const auto large = file_table_exposure(defaults, 1ull << 30, 2466170);
    EXPECT_FALSE(large.within_share());
    EXPECT_NE(large.describe().find("raise fs.file-max"), std::string::npos) << large.describe();
    EXPECT_NE(large.describe().find("60 MiB"), std::string::npos) << large.describe();
    // No memory limit: nothing bounds them.
    EXPECT_FALSE(file_table_exposure(defaults, 0, 2466170).within_share());
    // systemd's fs.file-max (LONG_MAX): the table cannot be filled, memory is the bound.
    const auto systemd = file_table_exposure(defaults, 1ull << 30, 9223372036854775807ull);
    EXPECT_TRUE(systemd.table_unbounded());
    EXPECT_TRUE(systemd.within_share());
    EXPECT_NE(systemd.describe().find("unbounded"), std::string::npos) << systemd.describe();
}

}  // namespace
}  // namespace maf_sandbox::runtime
