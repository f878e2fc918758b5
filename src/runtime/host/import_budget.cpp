#include "import_budget.hpp"

#include <fmt/format.h>
#include <sys/statvfs.h>

#include <cerrno>

namespace maf_sandbox::runtime::image_archive {

namespace {

std::uint64_t depth_of(const std::string& path) {
    std::uint64_t depth = path.empty() ? 0 : 1;
    for (char c : path) {
        depth += c == '/' ? 1 : 0;
    }
    return depth;
}

struct statvfs filesystem_of(int fd) {
    struct statvfs st {};
    if (::fstatvfs(fd, &st) != 0) {
        throw SystemError(errno, "reading the image store's free space");
    }
    return st;
}

}  // namespace

ImportBudget::ImportBudget(ImportLimits limits, int store_fd)
    : limits_(std::move(limits)), store_fd_(store_fd) {}

void ImportBudget::entry(const std::string& path) {
    ++entries_;
    if (entries_ > limits_.max_entries) {
        throw ImageImportLimitExceeded(
            fmt::format("image import refused at entry '{}': the archive has more than {} "
                        "entries (the cap on an import's entry count; {} reached). Raise it with "
                        "{} if the image really holds that many files",
                        path, limits_.max_entries, entries_, limits_.max_entries_setting),
            "entries", limits_.max_entries, entries_, limits_.max_entries_setting);
    }
    if (const auto depth = depth_of(path); depth > limits_.max_depth) {
        throw ImageImportLimitExceeded(
            fmt::format("image import refused at entry '{}': its path is {} components deep, "
                        "over the cap of {} on an import's directory depth. Raise it with {} if "
                        "the image really nests that deep",
                        path.substr(0, 200), depth, limits_.max_depth, limits_.max_depth_setting),
            "depth", limits_.max_depth, depth, limits_.max_depth_setting);
    }
    const auto fs = filesystem_of(store_fd_);
    const auto floor = static_cast<std::uint64_t>(fs.f_files) * limits_.min_free_percent / 100;
    if (fs.f_files > 0 && static_cast<std::uint64_t>(fs.f_favail) <= floor) {
        throw ImageImportLimitExceeded(
            fmt::format("image import refused at entry '{}' ({} entries written): the image "
                        "store's filesystem is down to {} free inodes, and an import leaves at "
                        "least {}% of its {} free. Free inodes there, or lower the floor with {}",
                        path, entries_, fs.f_favail, limits_.min_free_percent, fs.f_files,
                        limits_.min_free_setting),
            "free space", limits_.min_free_percent, entries_, limits_.min_free_setting);
    }
    // A directory takes blocks too: an archive of empty directories must not fill the disk.
    check_free_bytes(0, path);
}

void ImportBudget::bytes(std::uint64_t more, const std::string& path) {
    const auto total = bytes_ + more;
    if (total > limits_.max_bytes) {
        throw ImageImportLimitExceeded(
            fmt::format("image import refused at '{}': it would write more than {} bytes into "
                        "the image store (the cap on an import's unpacked bytes; {} reached). "
                        "Raise it with {} if the image is really that large",
                        path, limits_.max_bytes, total, limits_.max_bytes_setting),
            "bytes", limits_.max_bytes, total, limits_.max_bytes_setting);
    }
    check_free_bytes(more, path);
    bytes_ = total;
}

void ImportBudget::check_free_bytes(std::uint64_t more, const std::string& path) const {
    const auto fs = filesystem_of(store_fd_);
    const auto size = static_cast<std::uint64_t>(fs.f_blocks) * fs.f_frsize;
    const auto available = static_cast<std::uint64_t>(fs.f_bavail) * fs.f_frsize;
    const auto floor = size * limits_.min_free_percent / 100;
    if (available < floor + more) {
        throw ImageImportLimitExceeded(
            fmt::format("image import refused at '{}' ({} bytes written): the image store's "
                        "filesystem has {} bytes free, and an import leaves at least {}% of its "
                        "{} bytes free. Free space there, or lower the floor with {}",
                        path, bytes_, available, limits_.min_free_percent, size,
                        limits_.min_free_setting),
            "free space", limits_.min_free_percent, bytes_ + more, limits_.min_free_setting);
    }
}

}  // namespace maf_sandbox::runtime::image_archive
