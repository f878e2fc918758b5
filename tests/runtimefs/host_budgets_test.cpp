// The per-sandbox bounds on the host's shared budgets (host_budgets.hpp): the file share formula,
// the pid budget, and the environment overrides.
#include "maf_sandbox/runtime/kernel/host_budgets.hpp"

#include <gtest/gtest.h>
#include <stdlib.h>

#include "maf_sandbox/core/errors.hpp"

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

TEST(HostBudgets, EnvironmentOverridesEachDefaultAndRefusesNonsense) {
    ::setenv("MAF_SANDBOX_PID_SHARE", "50", 1);
    ::setenv("MAF_SANDBOX_FILE_SHARE", "5", 1);
    ::setenv("MAF_SANDBOX_SIGPENDING", "1024", 1);
    ::setenv("MAF_SANDBOX_MSGQUEUE_BYTES", "4096", 1);
    const auto budgets = HostBudgets::from_environment();
    EXPECT_EQ(budgets.pid_share_percent, 50u);
    EXPECT_EQ(budgets.file_share_percent, 5u);
    EXPECT_EQ(budgets.sigpending, 1024u);
    EXPECT_EQ(budgets.msgqueue_bytes, 4096u);
    for (const char* bad : {"0", "101", "-5", "ten", "5%"}) {
        ::setenv("MAF_SANDBOX_PID_SHARE", bad, 1);
        EXPECT_THROW(HostBudgets::from_environment(), InvalidArgument) << bad;
    }
    for (const char* name : {"MAF_SANDBOX_PID_SHARE", "MAF_SANDBOX_FILE_SHARE",
                             "MAF_SANDBOX_SIGPENDING", "MAF_SANDBOX_MSGQUEUE_BYTES"}) {
        ::unsetenv(name);
    }
    EXPECT_EQ(HostBudgets::from_environment().pid_share_percent, HostBudgets{}.pid_share_percent);
}

TEST(HostBudgets, TheKernelsNumbersAreRead) {
    EXPECT_GT(read_kernel_number("/proc/sys/kernel/pid_max"), 300u);
    EXPECT_GT(read_kernel_number("/proc/sys/fs/file-max"), 1000u);
    EXPECT_THROW(read_kernel_number("/proc/sys/no/such"), SystemError);
}

}  // namespace
}  // namespace maf_sandbox::runtime
