// Every huge page size's hugetlb limit at 0 in a sandbox's cgroup (cgroup_hugetlb.hpp).
#include "maf_sandbox/runtime/kernel/cgroup_hugetlb.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>

#include <fmt/format.h>

#include "maf_sandbox/core/errors.hpp"
#include "maf_sandbox/runtime/kernel/kernel_files.hpp"
#include "maf_sandbox/runtime/kernel/unique_fd.hpp"

namespace maf_sandbox::runtime {

namespace {

// As the kernel's hugetlb controller spells a size in its file names.
std::string size_name(std::uint64_t kib) {
    constexpr std::uint64_t kMiB = 1024;
    constexpr std::uint64_t kGiB = 1024 * 1024;
    if (kib >= kGiB) {
        return fmt::format("{}GB", kib / kGiB);
    }
    if (kib >= kMiB) {
        return fmt::format("{}MB", kib / kMiB);
    }
    return fmt::format("{}KB", kib);
}

// Writes "0" to `name` beneath `dir` (a link there is refused); false with errno set. O_TRUNC is
// harmless on kernel files and keeps a plain file to exactly what was written.
bool write_zero(int dir, const std::string& name) {
    UniqueFd fd(::openat(dir, name.c_str(), O_WRONLY | O_TRUNC | O_CLOEXEC | O_NOFOLLOW));
    if (!fd) {
        return false;
    }
    ssize_t written = -1;
    do {
        written = ::write(fd.get(), "0", 1);
    } while (written < 0 && errno == EINTR);
    return written == 1;
}

bool hugetlb_in(const std::filesystem::path& controllers_file) {
    const auto text = read_kernel_file(controllers_file).value_or("");
    for (std::size_t at = text.find("hugetlb"); at != std::string::npos;
         at = text.find("hugetlb", at + 1)) {
        const bool starts = at == 0 || text[at - 1] == ' ';
        const auto end = at + 7;
        if (starts && (end == text.size() || text[end] == ' ' || text[end] == '\n')) {
            return true;
        }
    }
    return false;
}

}  // namespace

std::vector<std::string> hugetlb_sizes(int hugepages_dir) {
    std::vector<std::string> sizes;
    const int copy = ::fcntl(hugepages_dir, F_DUPFD_CLOEXEC, 0);
    DIR* dir = copy >= 0 ? ::fdopendir(copy) : nullptr;
    if (dir == nullptr) {
        if (copy >= 0) {
            ::close(copy);
        }
        return sizes;
    }
    ::rewinddir(dir);
    while (const dirent* entry = ::readdir(dir)) {
        std::string_view name(entry->d_name);
        constexpr std::string_view kPrefix = "hugepages-";
        constexpr std::string_view kSuffix = "kB";
        if (!name.starts_with(kPrefix) || !name.ends_with(kSuffix)) {
            continue;
        }
        name.remove_prefix(kPrefix.size());
        name.remove_suffix(kSuffix.size());
        std::uint64_t kib = 0;
        const auto parsed = std::from_chars(name.data(), name.data() + name.size(), kib);
        if (parsed.ec == std::errc{} && parsed.ptr == name.data() + name.size() && kib > 0) {
            sizes.push_back(size_name(kib));
        }
    }
    ::closedir(dir);
    return sizes;
}

std::vector<std::string> host_hugetlb_sizes() {
    UniqueFd dir(::open(kHugepagesDir, O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    return dir ? hugetlb_sizes(dir.get()) : std::vector<std::string>{};
}

std::string hugetlb_limit_file(CgroupLayout layout, std::string_view size) {
    return layout == CgroupLayout::v1 ? fmt::format("hugetlb.{}.limit_in_bytes", size)
                                      : fmt::format("hugetlb.{}.max", size);
}

void deny_hugetlb(int cgroup_dir, CgroupLayout layout, const std::vector<std::string>& sizes) {
    for (const auto& size : sizes) {
        const auto file = hugetlb_limit_file(layout, size);
        if (!write_zero(cgroup_dir, file)) {
            throw SystemError(errno, fmt::format("setting the sandbox's {} to 0", file),
                              "run as root so the runtime can bound the sandbox's huge pages");
        }
        if (layout == CgroupLayout::v2) {
            // A reservation counts against the pool before any fault does; kernels without
            // reservation accounting have no such file.
            const auto reserved = fmt::format("hugetlb.{}.rsvd.max", size);
            if (!write_zero(cgroup_dir, reserved) && errno != ENOENT) {
                throw SystemError(errno, fmt::format("setting the sandbox's {} to 0", reserved));
            }
        }
    }
}

std::string hugetlb_guard_description() {
    if (host_hugetlb_sizes().empty()) {
        return "seccomp only (this kernel offers no huge pages)";
    }
    CgroupLayout layout = CgroupLayout::v1;
    try {
        layout = detect_cgroup_layout();
    } catch (const SystemError&) {
        return "seccomp only (no cgroup filesystem here)";
    }
    const std::filesystem::path root(kCgroupRoot);
    if (layout == CgroupLayout::v2) {
        return hugetlb_in(root / "cgroup.controllers")
                   ? "seccomp and the cgroup v2 hugetlb controller (every size's limit 0)"
                   : "seccomp only (cgroup v2 here has no hugetlb controller)";
    }
    std::error_code ec;
    if (std::filesystem::exists(root / "hugetlb" / "cgroup.procs", ec)) {
        return "seccomp and the cgroup v1 hugetlb controller (every size's limit 0)";
    }
    return "seccomp only (no v1 hugetlb hierarchy is mounted; a hugetlb controller on the hybrid "
           "layout's unified hierarchy is not used)";
}

}  // namespace maf_sandbox::runtime
