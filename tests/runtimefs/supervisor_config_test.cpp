// The supervisor's config as the launcher writes it and the supervisor reads it back.
#include "maf_sandbox/runtime/wire/supervisor_config.hpp"

#include <gtest/gtest.h>

#include <cstring>

#include "maf_sandbox/core/errors.hpp"

namespace maf_sandbox::runtime {
namespace {

SupervisorConfig sample_config() {
    SupervisorConfig config;
    config.id = "0123456789abcdef0123456789abcdef";
    config.sandbox_dir = "/var/lib/maf-sandbox/sandboxes/0123456789abcdef0123456789abcdef";
    config.socket_path = config.sandbox_dir / "exec.sock";
    config.mounts.layer_mount_point = "/var/lib/maf-sandbox/mnt";
    config.seccomp = guest_seccomp_program();
    return config;
}

bool same_program(const std::vector<sock_filter>& a, const std::vector<sock_filter>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof a[0]) == 0;
}

TEST(SupervisorConfig, CarriesTheLaunchersCompiledSeccompFilterUnchanged) {
    const auto config = sample_config();
    const auto back = supervisor_config_from_json(to_json(config));
    EXPECT_TRUE(same_program(back.seccomp, guest_seccomp_program()));
    EXPECT_EQ(back.mounts.layer_mount_point, config.mounts.layer_mount_point);
}

TEST(SupervisorConfig, WithoutAFilterIsRefusedNeverRunUnfiltered) {
    auto json = to_json(sample_config());
    json.as_object().erase("seccomp_bpf");
    EXPECT_ANY_THROW(supervisor_config_from_json(json));
}

TEST(SupervisorConfig, RefusesAFilterThatIsNotWholeInstructionsOfHex) {
    for (const char* bad : {"00", "zz00000000000000", "0000000000000000AB"}) {
        auto json = to_json(sample_config());
        json.as_object()["seccomp_bpf"] = bad;
        EXPECT_THROW(supervisor_config_from_json(json), InvalidArgument) << bad;
    }
}

TEST(SupervisorConfig, CarriesTheSandboxsBudgetsAndIds) {
    auto config = sample_config();
    config.ids.host_base = 0x70000000;
    config.ids.count = 65534;
    config.budgets.nofile = 481;
    config.budgets.sigpending = 4096;
    config.budgets.msgqueue_bytes = 819200;
    config.budgets.namespace_limits = {{"max_inotify_instances", 128}};
    const auto back = supervisor_config_from_json(to_json(config));
    EXPECT_EQ(back.ids.host_base, 0x70000000u);
    EXPECT_EQ(back.ids.count, 65534u);
    EXPECT_EQ(back.budgets.nofile, 481u);
    EXPECT_EQ(back.budgets.sigpending, 4096u);
    EXPECT_EQ(back.budgets.msgqueue_bytes, 819200u);
    EXPECT_EQ(back.budgets.namespace_limits, config.budgets.namespace_limits);
}

TEST(SupervisorConfig, AConfigWithoutBudgetsSetsNoLimitsAsBefore) {
    auto json = to_json(sample_config());
    json.as_object().erase("budgets");
    EXPECT_EQ(supervisor_config_from_json(json).budgets.nofile, 0u);
}

TEST(SupervisorConfig, ABudgetNamingAnythingButAUserNamespaceLimitIsRefused) {
    for (const char* bad : {"../../kernel/core_pattern", "max_x/../../y", "core_pattern", ""}) {
        auto config = sample_config();
        config.budgets.nofile = 100;
        config.budgets.namespace_limits = {{bad, 1}};
        EXPECT_THROW(supervisor_config_from_json(to_json(config)), InvalidArgument) << bad;
    }
}

TEST(CgroupPlacement, ALineReadsBackAsTheSamePlacement) {
    const CgroupPlacement placement{
        CgroupLayout::v1,
        {"/sys/fs/cgroup/pids/maf-sbx-x"},
        {"/sys/fs/cgroup/pids/maf-sbx-x/tasks", "/sys/fs/cgroup/memory/maf-sbx-x/tasks"},
        "/sys/fs/cgroup/memory/maf-sbx-x/memory.oom_control"};
    const auto line = to_line(placement);
    ASSERT_EQ(line.back(), '\n');
    const auto back = cgroup_placement_from_line(std::string_view(line).substr(0, line.size() - 1));
    EXPECT_EQ(back.layout, placement.layout);
    EXPECT_EQ(back.delegated, placement.delegated);
    EXPECT_EQ(back.join_files, placement.join_files);
    EXPECT_EQ(back.oom_kill_count_file, placement.oom_kill_count_file);
}

}  // namespace
}  // namespace maf_sandbox::runtime
