// remove_tree_at (fd_ops.hpp): removing a directory tree by directory descriptor, never following
// a link, with a bounded number of descriptors however deep the tree is.
//
// The walk is iterative. Each level of the path from the top to the directory being emptied is
// remembered by name and identity (device and inode); only the deepest few keep a descriptor
// open. Going back up to a level whose descriptor was closed reopens it as ".." of the level below
// and checks that it is the directory seen on the way down: a tree moved while it is removed
// stops the walk instead of steering it into a directory it never descended into.
#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <string>
#include <vector>

#include "fd_ops.hpp"
#include "maf_sandbox/core/errors.hpp"

namespace maf_sandbox::runtime::detail {

namespace {

// Descriptors the walk keeps open at once (the deepest levels); deeper trees reopen levels.
constexpr std::size_t kOpenLevels = 16;
// Rounds of listing one directory again when entries keep appearing (a guest still writing).
constexpr int kRounds = 8;

struct Level {
    std::string name;  // its name in the level above (or in the caller's parent)
    dev_t device = 0;
    ino_t inode = 0;
    UniqueFd fd;
    bool listed = false;
    int rounds = 0;
    std::vector<std::string> subdirectories;  // still to enter
};

std::vector<std::string> directory_names(int dir_fd) {
    std::vector<std::string> names;
    const int copy = ::fcntl(dir_fd, F_DUPFD_CLOEXEC, 0);
    if (copy < 0) {
        throw SystemError(errno, "duplicating a directory descriptor");
    }
    DIR* dir = ::fdopendir(copy);
    if (dir == nullptr) {
        const int error = errno;
        ::close(copy);
        throw SystemError(error, "reading a directory");
    }
    ::rewinddir(dir);
    while (const dirent* entry = ::readdir(dir)) {
        const std::string_view name = entry->d_name;
        if (name != "." && name != "..") {
            names.emplace_back(name);
        }
    }
    ::closedir(dir);
    return names;
}

class TreeRemoval {
  public:
    TreeRemoval(int parent_fd, bool stay_on_device, dev_t device, std::string_view describe)
        : parent_fd_(parent_fd),
          stay_on_device_(stay_on_device),
          device_(device),
          describe_(describe) {}

    void run(const std::string& name) {
        if (!enter(parent_fd_, name)) {
            return;
        }
        while (!levels_.empty()) {
            Level& level = levels_.back();
            if (!level.listed) {
                list(level);
            }
            if (!level.subdirectories.empty()) {
                const auto child = std::move(level.subdirectories.back());
                level.subdirectories.pop_back();
                enter(level.fd.get(), child);
                continue;
            }
            leave();
        }
    }

  private:
    // Opens `name` in `parent` as the next level; a name that is not a directory (any more) is
    // unlinked itself, never what it points to. False when nothing was entered.
    bool enter(int parent, const std::string& name) {
        const int raw = open_in_root(parent, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW);
        if (raw == -ENOENT) {
            return false;
        }
        if (raw == -ELOOP || raw == -ENOTDIR) {
            if (::unlinkat(parent, name.c_str(), 0) != 0 && errno != ENOENT) {
                throw SystemError(errno, fmt::format("removing '{}' inside {}", name, describe_));
            }
            return false;
        }
        if (raw < 0) {
            throw SystemError(-raw,
                              fmt::format("opening '{}' inside {} for removal", name, describe_));
        }
        UniqueFd dir{raw};
        struct stat st {};
        if (::fstat(dir.get(), &st) != 0) {
            throw SystemError(errno, fmt::format("inspecting '{}' inside {}", name, describe_));
        }
        if (stay_on_device_ && st.st_dev != device_) {
            throw SystemError(
                EXDEV,
                fmt::format("removing '{}' inside {}: a mount is still there", name, describe_),
                "unmount it first (maf-sandbox gc detaches stale mounts)");
        }
        Level level;
        level.name = name;
        level.device = st.st_dev;
        level.inode = st.st_ino;
        level.fd = std::move(dir);
        levels_.push_back(std::move(level));
        if (levels_.size() > kOpenLevels) {
            levels_[levels_.size() - 1 - kOpenLevels].fd.reset();
        }
        return true;
    }

    // Unlinks every non-directory child and queues the directories.
    void list(Level& level) {
        level.listed = true;
        for (auto& child : directory_names(level.fd.get())) {
            struct stat st {};
            if (::fstatat(level.fd.get(), child.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
                if (errno == ENOENT) {
                    continue;
                }
                throw SystemError(errno,
                                  fmt::format("inspecting '{}' inside {}", child, describe_));
            }
            if (S_ISDIR(st.st_mode)) {
                level.subdirectories.push_back(std::move(child));
            } else if (::unlinkat(level.fd.get(), child.c_str(), 0) != 0) {
                if (errno == EISDIR) {
                    level.subdirectories.push_back(std::move(child));
                } else if (errno != ENOENT) {
                    throw SystemError(errno,
                                      fmt::format("removing '{}' inside {}", child, describe_));
                }
            }
        }
    }

    // The emptied deepest level is removed from the level above, which is reopened first when
    // its descriptor was closed.
    void leave() {
        Level& level = levels_.back();
        int parent = parent_fd_;
        if (levels_.size() >= 2) {
            Level& above = levels_[levels_.size() - 2];
            if (!above.fd) {
                reopen_above(level, above);
            }
            parent = above.fd.get();
        }
        if (::unlinkat(parent, level.name.c_str(), AT_REMOVEDIR) == 0 || errno == ENOENT) {
            levels_.pop_back();
            return;
        }
        if (errno != ENOTEMPTY && errno != EEXIST) {
            throw SystemError(
                errno, fmt::format("removing directory '{}' inside {}", level.name, describe_));
        }
        // New entries appeared while we worked: list it again, a few rounds at most.
        if (++level.rounds >= kRounds) {
            throw SystemError(
                ENOTEMPTY, fmt::format("removing directory '{}' inside {}", level.name, describe_),
                "something keeps writing into it; stop it and retry");
        }
        level.listed = false;
    }

    void reopen_above(const Level& level, Level& above) {
        // Plain openat: "..", resolved by the kernel from the level's own descriptor, is its
        // parent whatever names lead there; the identity check below is what confines it.
        UniqueFd fd{
            ::openat(level.fd.get(), "..", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)};
        if (!fd) {
            throw SystemError(errno, fmt::format("reopening the directory above '{}' inside {}",
                                                 level.name, describe_));
        }
        struct stat st {};
        if (::fstat(fd.get(), &st) != 0) {
            throw SystemError(errno, fmt::format("inspecting the directory above '{}' inside {}",
                                                 level.name, describe_));
        }
        if (st.st_dev != above.device || st.st_ino != above.inode) {
            throw SystemError(
                ESTALE,
                fmt::format("removing '{}' inside {}: the tree was moved while it was removed",
                            above.name, describe_),
                "retry the removal once nothing moves it");
        }
        above.fd = std::move(fd);
    }

    int parent_fd_;
    bool stay_on_device_;
    dev_t device_;
    std::string describe_;
    std::vector<Level> levels_;
};

}  // namespace

void remove_tree_at(int parent_fd, const std::string& name, bool stay_on_device,
                    std::string_view describe) {
    struct stat st {};
    if (::fstat(parent_fd, &st) != 0) {
        throw SystemError(errno, fmt::format("inspecting {}", describe));
    }
    TreeRemoval(parent_fd, stay_on_device, st.st_dev, describe).run(name);
}

}  // namespace maf_sandbox::runtime::detail
