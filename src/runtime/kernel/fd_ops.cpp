#include "fd_ops.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>
#include <deque>
#include <vector>

#include "maf_sandbox/core/errors.hpp"
#include "maf_sandbox/core/random_id.hpp"
#include "maf_sandbox/runtime/kernel/state_dir.hpp"

#if __has_include(<linux/openat2.h>)
#include <linux/openat2.h>
#else
struct open_how {
    __u64 flags;
    __u64 mode;
    __u64 resolve;
};
#define RESOLVE_NO_MAGICLINKS 0x02
#define RESOLVE_NO_SYMLINKS 0x04
#define RESOLVE_IN_ROOT 0x10
#endif
#ifndef SYS_openat2
#define SYS_openat2 437
#endif

namespace maf_sandbox::runtime::detail {

int open_in_root(int dirfd, const std::string& path, int flags, mode_t mode) {
    struct open_how how {};
    how.flags = static_cast<std::uint64_t>(flags | O_CLOEXEC);
    how.mode = (flags & (O_CREAT | O_TMPFILE)) ? mode : 0;
    how.resolve = RESOLVE_IN_ROOT | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS;
    const char* name = path.empty() ? "." : path.c_str();
    // EAGAIN: a concurrent rename raced the resolution; the kernel asks us to retry.
    for (int attempt = 0; attempt < 64; ++attempt) {
        const long fd = ::syscall(SYS_openat2, dirfd, name, &how, sizeof how);
        if (fd >= 0) {
            return static_cast<int>(fd);
        }
        if (errno != EINTR && errno != EAGAIN) {
            return -errno;
        }
    }
    return -EAGAIN;
}

void make_state_dir(const std::filesystem::path& path, mode_t mode) {
    (void)open_trusted_state_dir(path, mode);
}

void remove_host_tree(const std::filesystem::path& path, bool stay_on_device) {
    const auto parent = path.parent_path();
    const auto name = path.filename().string();
    if (name.empty() || name == "." || name == "..") {
        throw InvalidArgument(
            fmt::format("refusing to remove '{}': not a plain directory name", path.string()));
    }
    UniqueFd parent_fd{
        ::open(parent.empty() ? "." : parent.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC)};
    if (!parent_fd) {
        if (errno == ENOENT) {
            return;
        }
        throw SystemError(errno, fmt::format("opening '{}'", parent.string()));
    }
    remove_tree_at(parent_fd.get(), name, stay_on_device, fmt::format("'{}'", parent.string()));
}

std::string random_hex(std::size_t bytes) {
    return maf_sandbox::random_hex(bytes);
}

bool read_exact(int fd, char* data, std::size_t size) noexcept {
    while (size > 0) {
        const ssize_t n = ::read(fd, data, size);
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n <= 0) {
            return false;
        }
        data += n;
        size -= static_cast<std::size_t>(n);
    }
    return true;
}

namespace {

// One byte with room for one descriptor, for sendmsg and recvmsg (it points into itself: not
// copyable).
struct FdMessage {
    explicit FdMessage(char& byte) noexcept : data{&byte, 1} {
        message.msg_iov = &data;
        message.msg_iovlen = 1;
        message.msg_control = control;
        message.msg_controllen = sizeof control;
    }
    FdMessage(const FdMessage&) = delete;
    FdMessage& operator=(const FdMessage&) = delete;

    iovec data;
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
    msghdr message{};
};

}  // namespace

}  // namespace maf_sandbox::runtime::detail

namespace maf_sandbox::runtime {

bool send_fd(int channel, int fd, char byte) noexcept {
    using detail::FdMessage;
    FdMessage out(byte);
    msghdr& message = out.message;
    cmsghdr* header = CMSG_FIRSTHDR(&message);
    header->cmsg_level = SOL_SOCKET;
    header->cmsg_type = SCM_RIGHTS;
    header->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(header), &fd, sizeof(int));
    ssize_t sent = 0;
    do {
        sent = ::sendmsg(channel, &message, MSG_NOSIGNAL);
    } while (sent < 0 && errno == EINTR);
    return sent == 1;
}

UniqueFd receive_fd(int channel, char& byte, int flags) noexcept {
    using detail::FdMessage;
    FdMessage in(byte);
    msghdr& message = in.message;
    ssize_t received = 0;
    do {
        received = ::recvmsg(channel, &message, MSG_CMSG_CLOEXEC | flags);
    } while (received < 0 && errno == EINTR);
    const cmsghdr* header = received == 1 ? CMSG_FIRSTHDR(&message) : nullptr;
    if (header == nullptr || header->cmsg_level != SOL_SOCKET || header->cmsg_type != SCM_RIGHTS ||
        header->cmsg_len != CMSG_LEN(sizeof(int))) {
        return UniqueFd();
    }
    int fd = -1;
    std::memcpy(&fd, CMSG_DATA(header), sizeof(int));
    return UniqueFd(fd);
}

}  // namespace maf_sandbox::runtime

namespace maf_sandbox::runtime::detail {

int write_all(int fd, std::string_view data) {
    while (!data.empty()) {
        const ssize_t wrote = ::write(fd, data.data(), data.size());
        if (wrote < 0) {
            if (errno == EINTR) {
                continue;
            }
            return errno;
        }
        data.remove_prefix(static_cast<std::size_t>(wrote));
    }
    return 0;
}

void write_file_durably(const std::filesystem::path& path, std::string_view content, mode_t mode,
                        bool sync) {
    const auto dir = path.parent_path();
    UniqueFd dir_fd{::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC)};
    if (!dir_fd) {
        throw SystemError(errno, fmt::format("opening directory '{}'", dir.string()));
    }
    const auto name = path.filename().string();
    const auto temp = fmt::format(".{}.tmp-{}", name, random_hex(8));
    UniqueFd fd{::openat(dir_fd.get(), temp.c_str(),
                         O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode)};
    if (!fd) {
        throw SystemError(errno, fmt::format("creating a temporary file in '{}'", dir.string()));
    }
    auto fail = [&](int error, const std::string& doing) {
        ::unlinkat(dir_fd.get(), temp.c_str(), 0);
        throw SystemError(error, doing, "check free space and permissions on the state directory");
    };
    if (const int error = write_all(fd.get(), content); error != 0) {
        fail(error, fmt::format("writing '{}'", path.string()));
    }
    if (::fchmod(fd.get(), mode) != 0 || (sync && ::fsync(fd.get()) != 0)) {
        fail(errno, fmt::format("syncing '{}'", path.string()));
    }
    fd.reset();
    if (::renameat(dir_fd.get(), temp.c_str(), dir_fd.get(), name.c_str()) != 0) {
        fail(errno, fmt::format("renaming a temporary file onto '{}'", path.string()));
    }
    // The rename is durable only once the directory itself is on disk.
    if (sync && ::fsync(dir_fd.get()) != 0) {
        throw SystemError(errno, fmt::format("syncing directory '{}'", dir.string()));
    }
}

std::string read_host_file(const std::filesystem::path& path, std::size_t max_bytes) {
    UniqueFd fd{::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW)};
    if (!fd) {
        throw SystemError(errno, fmt::format("opening '{}'", path.string()));
    }
    std::string content;
    char buffer[65536];
    for (;;) {
        const ssize_t got = ::read(fd.get(), buffer, sizeof buffer);
        if (got < 0) {
            if (errno == EINTR) {
                continue;
            }
            throw SystemError(errno, fmt::format("reading '{}'", path.string()));
        }
        if (got == 0) {
            return content;
        }
        content.append(buffer, static_cast<std::size_t>(got));
        if (content.size() > max_bytes) {
            throw InvalidArgument(
                fmt::format("'{}' is larger than {} bytes; it is not what we expect "
                            "there",
                            path.string(), max_bytes));
        }
    }
}

}  // namespace maf_sandbox::runtime::detail

namespace maf_sandbox::runtime {

namespace {

constexpr int kMaxStateDirLinks = 40;  // as the kernel's own limit on links in one resolution

std::string owner_remedy(std::string_view advice) {
    const uid_t self = ::geteuid();
    return fmt::format("use a directory owned by {} with mode 0700, {}",
                       self == 0 ? std::string("root") : fmt::format("uid {}", self), advice);
}

// A directory on the way to the state directory: root's or ours, and nobody else may add or
// rename entries in it (a sticky one keeps others from renaming what is ours).
void check_ancestor(const struct stat& st, const std::string& shown, const std::string& full,
                    std::string_view advice) {
    const uid_t self = ::geteuid();
    if (st.st_uid != 0 && st.st_uid != self) {
        throw SystemError(EPERM,
                          fmt::format("refusing the state directory '{}': '{}' on its way is owned "
                                      "by uid {}, who could replace what lies beneath it",
                                      full, shown, st.st_uid),
                          owner_remedy(advice));
    }
    if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0 && (st.st_mode & S_ISVTX) == 0) {
        throw SystemError(EPERM,
                          fmt::format("refusing the state directory '{}': '{}' on its way can be "
                                      "written by other users (mode {:04o})",
                                      full, shown, st.st_mode & 07777),
                          owner_remedy(advice));
    }
}

void check_state_dir(int fd, const struct stat& st, mode_t mode, const std::string& full,
                     std::string_view advice) {
    if (st.st_uid != ::geteuid()) {
        throw SystemError(
            EPERM,
            fmt::format("refusing the state directory '{}': it is owned by uid {}, and its records "
                        "are acted on as uid {}",
                        full, st.st_uid, ::geteuid()),
            owner_remedy(advice));
    }
    const mode_t current = st.st_mode & 07777;
    if ((current & (S_IWGRP | S_IWOTH)) != 0) {
        throw SystemError(
            EPERM,
            fmt::format("refusing the state directory '{}': other users can write "
                        "it (mode {:04o}), so its records may be forged",
                        full, current),
            fmt::format("check its contents, then `chmod 0700` it; or {}", owner_remedy(advice)));
    }
    if ((current & ~mode) != 0 && ::fchmod(fd, current & mode) != 0) {
        throw SystemError(errno, fmt::format("tightening state directory '{}'", full),
                          "run as the directory's owner");
    }
}

std::deque<std::string> components_of(const std::filesystem::path& path) {
    std::deque<std::string> parts;
    for (const auto& part : path.relative_path()) {
        if (!part.empty() && part != ".") {
            parts.push_back(part.string());
        }
    }
    return parts;
}

UniqueFd open_root_checked(const std::string& full, std::string_view advice) {
    UniqueFd root{::open("/", O_PATH | O_DIRECTORY | O_CLOEXEC)};
    struct stat st {};
    if (!root || ::fstat(root.get(), &st) != 0) {
        throw SystemError(errno, "opening the root directory");
    }
    check_ancestor(st, "/", full, advice);
    return root;
}

}  // namespace

UniqueFd open_trusted_state_dir(const std::filesystem::path& path, mode_t mode,
                                std::string_view advice) {
    const auto normal = std::filesystem::absolute(path).lexically_normal();
    const std::string full = normal.string();
    auto pending = components_of(normal);
    if (pending.empty()) {
        throw InvalidArgument("the root directory cannot be a state directory");
    }
    UniqueFd dir = open_root_checked(full, advice);
    std::filesystem::path shown = "/";
    int links = 0;
    while (!pending.empty()) {
        const std::string name = std::move(pending.front());
        pending.pop_front();
        const bool last = pending.empty();
        struct stat st {};
        if (::fstatat(dir.get(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
            if (errno != ENOENT) {
                throw SystemError(errno, fmt::format("inspecting '{}'", (shown / name).string()));
            }
            if (::mkdirat(dir.get(), name.c_str(), last ? mode : 0755) != 0 && errno != EEXIST) {
                throw SystemError(
                    errno, fmt::format("creating state directory '{}'", (shown / name).string()),
                    "run as root or set MAF_SANDBOX_STATE_DIR to a writable directory");
            }
            if (::fstatat(dir.get(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
                throw SystemError(errno, fmt::format("inspecting '{}'", (shown / name).string()));
            }
        }
        if (S_ISLNK(st.st_mode)) {
            if (last) {
                throw SystemError(
                    ELOOP,
                    fmt::format("refusing the state directory '{}': it is a symbolic link", full),
                    "name the directory itself (after checking who owns it and where it is)");
            }
            if ((st.st_uid != 0 && st.st_uid != ::geteuid()) || ++links > kMaxStateDirLinks) {
                throw SystemError(
                    ELOOP,
                    fmt::format("refusing the state directory '{}': the link '{}' on its way is "
                                "owned by uid {} (or links nest too deep)",
                                full, (shown / name).string(), st.st_uid),
                    owner_remedy(advice));
            }
            std::string target(static_cast<std::size_t>(PATH_MAX), '\0');
            const ssize_t got = ::readlinkat(dir.get(), name.c_str(), target.data(), target.size());
            if (got < 0) {
                throw SystemError(errno,
                                  fmt::format("reading the link '{}'", (shown / name).string()));
            }
            target.resize(static_cast<std::size_t>(got));
            auto expanded = components_of(target);
            pending.insert(pending.begin(), expanded.begin(), expanded.end());
            if (!target.empty() && target.front() == '/') {
                dir = open_root_checked(full, advice);
                shown = "/";
            }
            continue;
        }
        if (!S_ISDIR(st.st_mode)) {
            throw SystemError(ENOTDIR, fmt::format("opening state directory '{}': '{}' is not a "
                                                   "directory",
                                                   full, (shown / name).string()));
        }
        // The entry was checked in a directory nobody else can change: this open finds it.
        UniqueFd next{::openat(dir.get(), name.c_str(),
                               (last ? O_RDONLY : O_PATH) | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)};
        struct stat opened {};
        if (!next || ::fstat(next.get(), &opened) != 0) {
            throw SystemError(errno,
                              fmt::format("opening state directory '{}'", (shown / name).string()));
        }
        shown = name == ".." ? shown.parent_path() : shown / name;
        if (last) {
            check_state_dir(next.get(), opened, mode, full, advice);
        } else {
            check_ancestor(opened, shown.string(), full, advice);
        }
        dir = std::move(next);
    }
    return dir;
}

}  // namespace maf_sandbox::runtime
