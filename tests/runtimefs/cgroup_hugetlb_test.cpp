// Huge page limits at 0 in a sandbox's cgroup (cgroup_hugetlb.hpp): the sizes read from a
// hugepages directory, the limit files written through a directory descriptor (a planted link is
// never followed), and, where this host's cgroup v2 offers the controller, the kernel's own files.
#include "maf_sandbox/runtime/kernel/cgroup_hugetlb.hpp"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "maf_sandbox/core/errors.hpp"
#include "maf_sandbox/runtime/kernel/kernel_files.hpp"
#include "maf_sandbox/runtime/kernel/unique_fd.hpp"
#include "test_dirs.hpp"

namespace maf_sandbox::runtime {
namespace {

namespace fs = std::filesystem;
using maf_sandbox::testing::TempDir;

UniqueFd open_dir(const fs::path& path) {
    return UniqueFd(::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
}

std::string content(const fs::path& file) {
    std::ifstream in(file);
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
}

TEST(HugetlbSizes, EveryHugepagesDirectoryIsNamedAsTheControllerSpellsItsSize) {
    TempDir dir("maf-hugetlb");
    for (const char* name : {"hugepages-2048kB", "hugepages-1048576kB", "hugepages-64kB",
                             "hugepages-kB", "hugepages-12x34kB", "other"}) {
        fs::create_directory(dir.path() / name);
    }
    const auto fd = open_dir(dir.path());
    auto sizes = hugetlb_sizes(fd.get());
    std::sort(sizes.begin(), sizes.end());
    EXPECT_EQ(sizes, (std::vector<std::string>{"1GB", "2MB", "64KB"}));
}

TEST(HugetlbSizes, ThisHostsListMatchesItsHugepagesDirectory) {
    std::size_t listed = 0;
    std::error_code ec;
    for (fs::directory_iterator it(kHugepagesDir, ec), end; !ec && it != end; it.increment(ec)) {
        listed += it->path().filename().string().starts_with("hugepages-") ? 1 : 0;
    }
    EXPECT_EQ(host_hugetlb_sizes().size(), listed);
}

TEST(DenyHugetlb, EverySizesLimitIsWrittenZeroInAV1Cgroup) {
    TempDir cgroup("maf-hugetlb");
    cgroup.write("hugetlb.2MB.limit_in_bytes", "9223372036854771712\n");
    cgroup.write("hugetlb.1GB.limit_in_bytes", "9223372036854771712\n");
    const auto fd = open_dir(cgroup.path());
    deny_hugetlb(fd.get(), CgroupLayout::v1, {"2MB", "1GB"});
    EXPECT_EQ(content(cgroup.path() / "hugetlb.2MB.limit_in_bytes"), "0");
    EXPECT_EQ(content(cgroup.path() / "hugetlb.1GB.limit_in_bytes"), "0");
}

TEST(DenyHugetlb, V2WritesTheLimitAndTheReservationWhereTheKernelHasOne) {
    TempDir cgroup("maf-hugetlb");
    cgroup.write("hugetlb.2MB.max", "max\n");
    cgroup.write("hugetlb.2MB.rsvd.max", "max\n");
    cgroup.write("hugetlb.1GB.max", "max\n");  // an older kernel: no reservation file
    const auto fd = open_dir(cgroup.path());
    deny_hugetlb(fd.get(), CgroupLayout::v2, {"2MB", "1GB"});
    EXPECT_EQ(content(cgroup.path() / "hugetlb.2MB.max"), "0");
    EXPECT_EQ(content(cgroup.path() / "hugetlb.2MB.rsvd.max"), "0");
    EXPECT_EQ(content(cgroup.path() / "hugetlb.1GB.max"), "0");
    EXPECT_FALSE(fs::exists(cgroup.path() / "hugetlb.1GB.rsvd.max"));
}

TEST(DenyHugetlb, AMissingLimitFileIsAnErrorNotASilentPass) {
    TempDir cgroup("maf-hugetlb");
    cgroup.write("hugetlb.2MB.max", "max\n");
    const auto fd = open_dir(cgroup.path());
    EXPECT_THROW(deny_hugetlb(fd.get(), CgroupLayout::v2, {"2MB", "1GB"}), SystemError);
}

TEST(DenyHugetlb, ALinkInPlaceOfALimitFileIsRefusedAndItsTargetKept) {
    TempDir cgroup("maf-hugetlb");
    TempDir elsewhere("maf-hugetlb-victim");
    const auto victim = elsewhere.write("victim", "untouched");
    fs::create_symlink(victim, cgroup.path() / "hugetlb.2MB.max");
    const auto fd = open_dir(cgroup.path());
    EXPECT_THROW(deny_hugetlb(fd.get(), CgroupLayout::v2, {"2MB"}), SystemError);
    EXPECT_EQ(content(victim), "untouched");
}

// The kernel's own hugetlb files: a child of this process's cgroup v2 root (the hybrid layout's
// unified hierarchy, or a pure v2 host's root), with the controller enabled for the test and the
// root's subtree_control restored after it.
TEST(DenyHugetlb, TheKernelsV2LimitFilesReadZeroAfterward) {
    const auto sizes = host_hugetlb_sizes();
    if (sizes.empty()) {
        GTEST_SKIP() << "this kernel offers no huge pages";
    }
    fs::path root;
    for (const fs::path& candidate : {fs::path(kCgroupRoot) / "unified", fs::path(kCgroupRoot)}) {
        const auto controllers = read_kernel_file(candidate / "cgroup.controllers");
        if (controllers && controllers->find("hugetlb") != std::string::npos) {
            root = candidate;
            break;
        }
    }
    if (root.empty() ||
        read_kernel_file("/proc/self/cgroup").value_or("").find("\n0::/\n") == std::string::npos) {
        GTEST_SKIP() << "no cgroup v2 root offering hugetlb that this process sits in: "
                     << hugetlb_guard_description();
    }
    const auto before = read_kernel_file(root / "cgroup.subtree_control").value_or("");
    const bool enabled_here = before.find("hugetlb") == std::string::npos;
    if (enabled_here) {
        std::ofstream(root / "cgroup.subtree_control") << "+hugetlb";
    }
    const fs::path child = root / fmt::format("maf-hugetlb-test-{}", ::getpid());
    ASSERT_EQ(::mkdir(child.c_str(), 0755), 0) << std::strerror(errno);
    {
        const auto fd = open_dir(child);
        EXPECT_NO_THROW(deny_hugetlb(fd.get(), CgroupLayout::v2, sizes));
        for (const auto& size : sizes) {
            EXPECT_EQ(read_kernel_file(child / hugetlb_limit_file(CgroupLayout::v2, size)), "0\n")
                << size;
        }
    }
    ::rmdir(child.c_str());
    if (enabled_here) {
        std::ofstream(root / "cgroup.subtree_control") << "-hugetlb";
    }
    EXPECT_EQ(read_kernel_file(root / "cgroup.subtree_control").value_or(""), before);
}

}  // namespace
}  // namespace maf_sandbox::runtime
