#include "image_staging.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <vector>

#include "../kernel/fd_ops.hpp"
#include "maf_sandbox/core/errors.hpp"

namespace maf_sandbox::runtime::image_staging {

namespace {

constexpr const char* kLockName = ".lock";
// Leftovers one sweep holds at once (a descriptor each); the next sweep takes any beyond.
constexpr std::size_t kClaimsPerSweep = 64;

void lock(int fd, int operation, std::string_view what) {
    while (::flock(fd, operation) != 0) {
        if (errno != EINTR) {
            throw SystemError(errno, fmt::format("locking {}", what));
        }
    }
}

std::vector<std::string> names_in(int dir_fd) {
    std::vector<std::string> names;
    const int copy = ::fcntl(dir_fd, F_DUPFD_CLOEXEC, 0);
    if (copy < 0) {
        throw SystemError(errno, "duplicating the image store's descriptor");
    }
    DIR* dir = ::fdopendir(copy);
    if (dir == nullptr) {
        const int error = errno;
        ::close(copy);
        throw SystemError(error, "reading the image store");
    }
    ::rewinddir(dir);
    while (const dirent* entry = ::readdir(dir)) {
        names.emplace_back(entry->d_name);
    }
    ::closedir(dir);
    return names;
}

}  // namespace

StoreLock::StoreLock(int images_fd, bool exclusive)
    : fd_(::openat(images_fd, kLockName, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600)) {
    if (!fd_) {
        throw SystemError(errno, "opening the image store's lock");
    }
    lock(fd_.get(), exclusive ? LOCK_EX : LOCK_SH, "the image store");
}

HeldDir HeldDir::create(int images_fd, std::string_view prefix) {
    const StoreLock store(images_fd, false);
    const auto name = std::string(prefix) + detail::random_hex(8);
    if (::mkdirat(images_fd, name.c_str(), 0700) != 0) {
        throw SystemError(errno, fmt::format("creating the image store's '{}'", name));
    }
    auto held = try_hold(images_fd, name);
    if (!held) {  // nobody else can know the name yet
        throw SystemError(EWOULDBLOCK, fmt::format("locking the image store's '{}'", name));
    }
    return std::move(*held);
}

std::optional<HeldDir> HeldDir::try_hold(int parent_fd, const std::string& name) {
    UniqueFd fd{::openat(parent_fd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)};
    if (!fd) {
        throw SystemError(errno, fmt::format("opening the image store's '{}'", name));
    }
    while (::flock(fd.get(), LOCK_EX | LOCK_NB) != 0) {
        if (errno == EWOULDBLOCK) {
            return std::nullopt;
        }
        if (errno != EINTR) {
            throw SystemError(errno, fmt::format("locking the image store's '{}'", name));
        }
    }
    return HeldDir{std::move(fd), name};
}

ImageSweepReport sweep(int images_fd) {
    ImageSweepReport report;
    std::vector<HeldDir> claimed;
    {
        const StoreLock store(images_fd, true);
        for (const auto& name : names_in(images_fd)) {
            const std::string_view view = name;
            if (!view.starts_with(kImportPrefix) && !view.starts_with(kRemovePrefix)) {
                continue;
            }
            if (claimed.size() == kClaimsPerSweep) {
                break;
            }
            try {
                if (auto held = HeldDir::try_hold(images_fd, name)) {
                    claimed.push_back(std::move(*held));
                } else {
                    ++report.busy;
                }
            } catch (const SystemError& e) {
                if (e.error_number() == ENOENT) {
                    continue;  // finished by its owner meanwhile
                }
                if (e.error_number() == ELOOP || e.error_number() == ENOTDIR) {
                    // Not one of ours (we only ever make directories there): the name goes.
                    ::unlinkat(images_fd, name.c_str(), 0);
                    continue;
                }
                report.errors.push_back(e.what());
            }
        }
    }
    for (auto& held : claimed) {
        try {
            detail::remove_tree_at(images_fd, held.name(), true, "the image store");
            ++(std::string_view(held.name()).starts_with(kImportPrefix) ? report.imports_removed
                                                                        : report.removals_resumed);
        } catch (const Error& e) {
            report.errors.push_back(
                fmt::format("removing the image store's '{}': {}", held.name(), e.what()));
        }
    }
    return report;
}

}  // namespace maf_sandbox::runtime::image_staging
