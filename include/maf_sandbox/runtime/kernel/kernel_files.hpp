// Reading the kernel's small text files (/proc/<pid>/..., cgroup and sysctl files), whose owner
// can vanish between the open and the read. A process that exits mid-read makes read() fail with
// ESRCH; a std::ifstream turns that into an exception from its iterator, so every reader of such a
// file goes through this one, which says "gone" instead.
#pragma once

#include <filesystem>
#include <optional>
#include <string>

namespace maf_sandbox::runtime {

// The whole file, or nullopt when it cannot be opened or read (the process or cgroup is gone,
// or the file never existed).
std::optional<std::string> read_kernel_file(const std::filesystem::path& file);

// The whole of an open descriptor, or nullopt on a read error.
std::optional<std::string> read_kernel_fd(int fd);

}  // namespace maf_sandbox::runtime
