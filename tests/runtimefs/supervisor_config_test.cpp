// The supervisor's config as the launcher writes it and the supervisor reads it back.
#include "maf_sandbox/runtime/supervisor.hpp"

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
