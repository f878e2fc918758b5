#include "maf_sandbox/runtime/kernel/file_table_exposure.hpp"

#include <fmt/format.h>

namespace maf_sandbox::runtime {

bool FileTableExposure::within_share() const {
    return table_unbounded() || (held_by_memory != 0 && held_by_memory <= share_files);
}

std::string FileTableExposure::describe() const {
    if (table_unbounded()) {
        return fmt::format(
            "fs.file-max is {} (unbounded): memory runs out before the file table does, so each "
            "sandbox's memory limit is the bound on the files it holds",
            file_max);
    }
    if (within_share()) {
        return fmt::format(
            "a sandbox's memory limit holds it to at most {} mapped files, within its {}% share "
            "({} of fs.file-max {})",
            held_by_memory, share_percent, share_files, file_max);
    }
    const std::uint64_t fitting_memory = share_files * kMinBytesPerHeldFile;
    return fmt::format(
        "a sandbox can hold {} files it mapped and closed, past its {}% share ({} of fs.file-max "
        "{}): only its memory limit bounds them ({} bytes each at least), so it could starve "
        "unprivileged host users and other sandboxes of files; raise fs.file-max (systemd sets "
        "it to the maximum) or keep sandboxes' memory at most {} MiB",
        held_by_memory == 0 ? std::string("unbounded numbers of") : std::to_string(held_by_memory),
        share_percent, share_files, file_max, kMinBytesPerHeldFile, fitting_memory >> 20);
}

FileTableExposure file_table_exposure(const HostBudgets& budgets, std::uint64_t memory_bytes,
                                      std::uint64_t file_max) {
    FileTableExposure out;
    out.file_max = file_max;
    out.share_percent = budgets.file_share_percent;
    out.share_files = file_max / 100 * budgets.file_share_percent;
    out.held_by_memory = memory_bytes / kMinBytesPerHeldFile;
    return out;
}

}  // namespace maf_sandbox::runtime
