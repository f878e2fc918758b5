// How much of the system file table one sandbox can hold through files it mapped and closed,
// which RLIMIT_NOFILE does not count, and whether its memory limit keeps that within its share.
#pragma once

#include <cstdint>
#include <string>

#include "maf_sandbox/runtime/kernel/host_budgets.hpp"

namespace maf_sandbox::runtime {

// Files held without a descriptor (mapped, then closed) are not counted by RLIMIT_NOFILE: each
// keeps its struct file and the mapping's vm_area_struct, and the kernel charges both to the
// sandbox's memory cgroup, which is then their only per-sandbox bound (a v1 kmem limit, which
// could have divided them off, is accepted and ignored by current kernels, and v2 has none). A
// floor on what one such file costs the sandbox, so the count it gives is a ceiling.
inline constexpr std::uint64_t kMinBytesPerHeldFile = 256;
// An fs.file-max this large (systemd sets the kernel's maximum at boot) cannot be filled: memory
// runs out first, and the file table is then no budget sandboxes share.
inline constexpr std::uint64_t kUnboundedFileMax = 1ull << 60;

// How much of the system file table one sandbox can hold through mapped files, and whether that
// is within the share its descriptors are held to.
struct FileTableExposure {
    std::uint64_t file_max = 0;
    std::uint64_t share_files = 0;     // fs.file-max x file_share_percent / 100
    std::uint64_t held_by_memory = 0;  // at most, by its memory limit; 0 when memory is unlimited
    std::uint32_t share_percent = 0;

    bool table_unbounded() const { return file_max >= kUnboundedFileMax; }
    // True when the sandbox's memory cannot hold more files than its share.
    bool within_share() const;
    // One sentence for a person: the bound that holds, or why none does and what would.
    std::string describe() const;
};

// `memory_bytes` is the sandbox's memory limit (0: none).
FileTableExposure file_table_exposure(const HostBudgets& budgets, std::uint64_t memory_bytes,
                                      std::uint64_t file_max);

}  // namespace maf_sandbox::runtime
