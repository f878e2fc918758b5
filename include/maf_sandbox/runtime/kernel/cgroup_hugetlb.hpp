// Huge pages come from a host-wide pool that no memory limit divides. The guest's seccomp filter
// refuses MAP_HUGETLB, SHM_HUGETLB and MFD_HUGETLB on every host; where the sandbox's cgroups
// carry the hugetlb controller, every huge page size's limit is 0 as well, so that a path the
// filter does not see (a hugetlbfs file, should one ever be reachable) is refused by the kernel's
// own accounting. Written over directory descriptors: the files are found beneath the cgroup the
// caller opened and never by a path a sandbox could have changed.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "maf_sandbox/runtime/kernel/cgroup.hpp"

namespace maf_sandbox::runtime {

// Where this kernel lists its huge page sizes, one hugepages-<N>kB directory each.
inline constexpr const char* kHugepagesDir = "/sys/kernel/mm/hugepages";

// The huge page sizes listed in the directory open as `hugepages_dir`, spelled as the hugetlb
// controller names its files ("2MB", "1GB", "64KB"), in the directory's order. Entries that are
// not hugepages-<N>kB are ignored. Empty when the directory cannot be read.
std::vector<std::string> hugetlb_sizes(int hugepages_dir);
// The same for kHugepagesDir; empty on a kernel without huge pages.
std::vector<std::string> host_hugetlb_sizes();

// The file of one size's limit: hugetlb.<size>.limit_in_bytes (v1), hugetlb.<size>.max (v2).
std::string hugetlb_limit_file(CgroupLayout layout, std::string_view size);

// Sets the limit of every size in `sizes` to 0 in the cgroup open as `cgroup_dir` (and, on v2,
// the reservation limit hugetlb.<size>.rsvd.max where the kernel has it). Throws SystemError
// naming the file when a limit file is missing or refuses the write.
void deny_hugetlb(int cgroup_dir, CgroupLayout layout, const std::vector<std::string>& sizes);

// Which guard keeps huge pages from a sandbox on this host, in a sentence for docs and reports:
// "seccomp and the cgroup v1 hugetlb controller", "... v2 ...", or "seccomp only (...)".
std::string hugetlb_guard_description();

}  // namespace maf_sandbox::runtime
