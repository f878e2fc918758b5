#include "file_plane.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <fmt/format.h>
#include <algorithm>
#include <boost/json/array.hpp>
#include <cerrno>
#include <cstring>
#include <vector>

#include "maf_sandbox/core/utf8.hpp"
#include "maf_sandbox/runtime/unique_fd.hpp"

namespace maf_sandbox::emulator {
namespace json = boost::json;
using runtime::UniqueFd;

namespace {

int openat2_in_root(int root, const std::string& path, int flags, mode_t mode = 0) {
    open_how how{};
    how.flags = static_cast<std::uint64_t>(flags | O_CLOEXEC);
    how.mode = (flags & O_CREAT) != 0 ? mode : 0;
    how.resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS;
    int fd;
    do {
        fd = static_cast<int>(::syscall(SYS_openat2, root, path.c_str(), &how, sizeof how));
    } while (fd < 0 && errno == EAGAIN);
    return fd;
}

[[noreturn]] void fail_errno(int error, std::string_view path, std::string_view doing) {
    switch (error) {
        case ENOENT:
            throw PlaneError{404, "FileNotFound",
                             fmt::format("The path '{}' does not exist.", path)};
        case ENOTDIR:
            throw PlaneError{400, "NotADirectory",
                             fmt::format("A component of '{}' is not a directory.", path)};
        case EISDIR:
            throw PlaneError{400, "PathIsDirectory", fmt::format("'{}' is a directory.", path)};
        case ENOTEMPTY:
        case EEXIST:
            throw PlaneError{409, "DirectoryNotEmpty",
                             fmt::format("'{}' is not empty; pass recursive=true.", path)};
        case ELOOP:
            // RESOLVE_NO_MAGICLINKS refuses /proc/<pid>/root and the like; or a link loop.
            throw PlaneError{400, "InvalidPath",
                             fmt::format("'{}' goes through a symbolic link loop or a /proc magic "
                                         "link, which the file API does not follow.",
                                         path)};
        case ENAMETOOLONG:
            throw PlaneError{400, "InvalidPath", fmt::format("The path '{}' is too long.", path)};
        case EXDEV:
            throw PlaneError{400, "InvalidPath",
                             fmt::format("The path '{}' leaves the sandbox's file system.", path)};
        case ENOSPC:
        case EDQUOT:
            throw PlaneError{507, "InsufficientStorage",
                             fmt::format("No space left while {} '{}'.", doing, path)};
        default:
            throw PlaneError{500, "FileOperationFailed",
                             fmt::format("{} '{}' failed: {}", doing, path, std::strerror(error))};
    }
}

void require_absolute(std::string_view path) {
    if (path.empty() || path.front() != '/' || path.find('\0') != std::string_view::npos) {
        throw PlaneError{400, "InvalidPath", fmt::format("The path '{}' must be absolute.", path)};
    }
}

// "/a/b/c" -> ("/a/b", "c"); "/" -> ("/", "").
std::pair<std::string, std::string> split(std::string_view path) {
    std::string p(path);
    while (p.size() > 1 && p.back() == '/') {
        p.pop_back();
    }
    const auto slash = p.rfind('/');
    std::string parent = slash == 0 ? "/" : p.substr(0, slash);
    return {parent, p.substr(slash + 1)};
}

json::object entry_json(const std::string& name, const std::string& path, const struct stat& st,
                        const std::optional<std::string>& target) {
    const bool is_link = S_ISLNK(st.st_mode);
    // A guest file name need not be UTF-8; a JSON string must be (the service's encoder writes
    // U+FFFD for invalid bytes too).
    json::object out{{"name", replace_invalid_utf8(name)},
                     {"path", replace_invalid_utf8(path)},
                     {"size", static_cast<std::int64_t>(S_ISFIFO(st.st_mode) ? 0 : st.st_size)},
                     {"mode", static_cast<std::int64_t>(st.st_mode & 07777)},
                     {"isDir", S_ISDIR(st.st_mode)},
                     {"isSymlink", is_link},
                     {"modifiedTime", static_cast<std::int64_t>(st.st_mtim.tv_sec)}};
    if (is_link && target) {
        out["symlinkTarget"] = replace_invalid_utf8(*target);
    }
    return out;
}

std::optional<std::string> link_target(int dir, const std::string& name) {
    std::vector<char> buffer(4096);
    const auto n = ::readlinkat(dir, name.c_str(), buffer.data(), buffer.size());
    if (n < 0) {
        return std::nullopt;
    }
    return std::string(buffer.data(), static_cast<std::size_t>(n));
}

void remove_tree(int parent, const std::string& name) {
    const int fd = ::openat(parent, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
        fail_errno(errno, name, "opening");
    }
    DIR* dir = ::fdopendir(fd);
    if (dir == nullptr) {
        ::close(fd);
        fail_errno(errno, name, "listing");
    }
    std::vector<std::pair<std::string, bool>> children;
    while (auto* e = ::readdir(dir)) {
        const std::string child = e->d_name;
        if (child == "." || child == "..") {
            continue;
        }
        struct stat st {};
        if (::fstatat(::dirfd(dir), child.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0) {
            children.emplace_back(child, S_ISDIR(st.st_mode));
        }
    }
    for (const auto& [child, is_dir] : children) {
        if (is_dir) {
            remove_tree(::dirfd(dir), child);
        } else if (::unlinkat(::dirfd(dir), child.c_str(), 0) != 0 && errno != ENOENT) {
            const int e = errno;
            ::closedir(dir);
            fail_errno(e, child, "removing");
        }
    }
    ::closedir(dir);
    if (::unlinkat(parent, name.c_str(), AT_REMOVEDIR) != 0 && errno != ENOENT) {
        fail_errno(errno, name, "removing");
    }
}

}  // namespace

ReadKind FilePlane::classify_read(std::string_view path) const {
    require_absolute(path);
    UniqueFd fd(openat2_in_root(root_, std::string(path), O_PATH));
    if (!fd) {
        fail_errno(errno, path, "reading");
    }
    struct stat st {};
    if (::fstat(fd.get(), &st) != 0) {
        fail_errno(errno, path, "reading");
    }
    if (S_ISDIR(st.st_mode)) {
        fail_errno(EISDIR, path, "reading");
    }
    if (S_ISFIFO(st.st_mode)) {
        return ReadKind::fifo;
    }
    if (!S_ISREG(st.st_mode)) {
        throw PlaneError{400, "NotARegularFile", fmt::format("'{}' is not a regular file.", path)};
    }
    return ReadKind::regular;
}

std::string FilePlane::read(std::string_view path, std::uint64_t max_bytes) const {
    require_absolute(path);
    // O_NONBLOCK: a FIFO swapped in after classify_read must not block a worker thread.
    UniqueFd fd(openat2_in_root(root_, std::string(path), O_RDONLY | O_NONBLOCK | O_NOCTTY));
    if (!fd) {
        fail_errno(errno, path, "reading");
    }
    struct stat st {};
    if (::fstat(fd.get(), &st) != 0) {
        fail_errno(errno, path, "reading");
    }
    if (S_ISDIR(st.st_mode)) {
        fail_errno(EISDIR, path, "reading");
    }
    if (!S_ISREG(st.st_mode)) {
        throw PlaneError{400, "NotARegularFile", fmt::format("'{}' is not a regular file.", path)};
    }
    if (static_cast<std::uint64_t>(st.st_size) > max_bytes) {
        throw PlaneError{413, "FileTooLarge",
                         fmt::format("'{}' is larger than {} bytes.", path, max_bytes)};
    }
    std::string out;
    char buffer[65536];
    for (;;) {
        const auto n = ::read(fd.get(), buffer, sizeof buffer);
        if (n < 0) {
            if (errno == EINTR) {
                continue;
            }
            fail_errno(errno, path, "reading");
        }
        if (n == 0) {
            break;
        }
        out.append(buffer, static_cast<std::size_t>(n));
        if (out.size() > max_bytes) {
            throw PlaneError{413, "FileTooLarge",
                             fmt::format("'{}' is larger than {} bytes.", path, max_bytes)};
        }
    }
    return out;
}

void FilePlane::mkdir(std::string_view path) const {
    require_absolute(path);
    std::string prefix;
    std::size_t start = 1;
    while (start <= path.size()) {
        auto end = path.find('/', start);
        if (end == std::string_view::npos) {
            end = path.size();
        }
        const auto component = path.substr(start, end - start);
        start = end + 1;
        if (component.empty() || component == ".") {
            continue;
        }
        const std::string parent = prefix.empty() ? "/" : prefix;
        prefix += "/" + std::string(component);
        UniqueFd existing(openat2_in_root(root_, prefix, O_PATH | O_DIRECTORY));
        if (existing) {
            continue;
        }
        if (errno != ENOENT) {
            fail_errno(errno, prefix, "creating");
        }
        UniqueFd parent_fd(openat2_in_root(root_, parent, O_PATH | O_DIRECTORY));
        if (!parent_fd) {
            fail_errno(errno, parent, "creating");
        }
        const std::string name(component);
        if (::mkdirat(parent_fd.get(), name.c_str(), 0755) != 0 && errno != EEXIST) {
            fail_errno(errno, prefix, "creating");
        }
        ::fchownat(parent_fd.get(), name.c_str(), owner_.uid, owner_.gid, AT_SYMLINK_NOFOLLOW);
        ::fchmodat(parent_fd.get(), name.c_str(), 0755, 0);
    }
}

void FilePlane::write(std::string_view path, std::string_view content, bool create_dirs,
                      std::optional<mode_t> mode) const {
    require_absolute(path);
    const auto [parent, name] = split(path);
    if (name.empty()) {
        fail_errno(EISDIR, path, "writing");
    }
    if (create_dirs) {
        mkdir(parent);
    }
    const std::string full(path);
    bool created = true;
    UniqueFd fd(
        openat2_in_root(root_, full, O_WRONLY | O_CREAT | O_EXCL | O_NOCTTY, mode.value_or(0644)));
    if (!fd && errno == EEXIST) {
        created = false;
        fd = UniqueFd(openat2_in_root(root_, full, O_WRONLY | O_TRUNC | O_NOCTTY | O_NONBLOCK));
    }
    if (!fd) {
        if (errno == ENOENT) {
            throw PlaneError{404, "DirectoryNotFound",
                             fmt::format("The parent directory of '{}' does not exist; pass "
                                         "createDirs=true.",
                                         path)};
        }
        fail_errno(errno, path, "writing");
    }
    std::size_t done = 0;
    while (done < content.size()) {
        const auto n = ::write(fd.get(), content.data() + done, content.size() - done);
        if (n < 0) {
            if (errno == EINTR) {
                continue;
            }
            fail_errno(errno, path, "writing");
        }
        done += static_cast<std::size_t>(n);
    }
    if (created) {
        ::fchown(fd.get(), owner_.uid, owner_.gid);
        ::fchmod(fd.get(), mode.value_or(0644));
    } else if (mode) {
        ::fchmod(fd.get(), *mode);
    }
}

json::object FilePlane::stat(std::string_view path) const {
    require_absolute(path);
    const auto [parent, name] = split(path);
    struct stat st {};
    std::optional<std::string> target;
    if (name.empty()) {
        if (::fstatat(root_, "", &st, AT_EMPTY_PATH) != 0) {
            fail_errno(errno, path, "stat");
        }
    } else {
        UniqueFd dir(openat2_in_root(root_, parent, O_PATH | O_DIRECTORY));
        if (!dir) {
            fail_errno(errno == ENOTDIR ? ENOENT : errno, path, "stat");
        }
        if (::fstatat(dir.get(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
            fail_errno(errno, path, "stat");
        }
        if (S_ISLNK(st.st_mode)) {
            target = link_target(dir.get(), name);
        }
    }
    return entry_json(name.empty() ? "/" : name, std::string(path), st, target);
}

json::object FilePlane::list(std::string_view path) const {
    require_absolute(path);
    const std::string dir_path(path);
    const int fd = openat2_in_root(root_, dir_path, O_RDONLY | O_DIRECTORY);
    if (fd < 0) {
        fail_errno(errno, path, "listing");
    }
    DIR* dir = ::fdopendir(fd);
    if (dir == nullptr) {
        ::close(fd);
        fail_errno(errno, path, "listing");
    }
    std::vector<std::string> names;
    while (auto* e = ::readdir(dir)) {
        const std::string name = e->d_name;
        if (name != "." && name != "..") {
            names.push_back(name);
        }
    }
    std::sort(names.begin(), names.end());
    std::string base = dir_path;
    while (base.size() > 1 && base.back() == '/') {
        base.pop_back();
    }
    json::array entries;
    for (const auto& name : names) {
        struct stat st {};
        if (::fstatat(::dirfd(dir), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
            continue;  // vanished while listing
        }
        std::optional<std::string> target;
        if (S_ISLNK(st.st_mode)) {
            target = link_target(::dirfd(dir), name);
        }
        entries.push_back(entry_json(name, (base == "/" ? "" : base) + "/" + name, st, target));
    }
    ::closedir(dir);
    return json::object{{"path", replace_invalid_utf8(dir_path)}, {"entries", std::move(entries)}};
}

void FilePlane::remove(std::string_view path, bool recursive) const {
    require_absolute(path);
    const auto [parent, name] = split(path);
    if (name.empty()) {
        throw PlaneError{400, "InvalidPath", "The root directory cannot be deleted."};
    }
    UniqueFd dir(openat2_in_root(root_, parent, O_PATH | O_DIRECTORY));
    if (!dir) {
        fail_errno(errno == ENOTDIR ? ENOENT : errno, path, "deleting");
    }
    struct stat st {};
    if (::fstatat(dir.get(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
        fail_errno(errno, path, "deleting");
    }
    if (!S_ISDIR(st.st_mode)) {
        if (::unlinkat(dir.get(), name.c_str(), 0) != 0) {
            fail_errno(errno, path, "deleting");
        }
        return;
    }
    if (!recursive) {
        if (::unlinkat(dir.get(), name.c_str(), AT_REMOVEDIR) != 0) {
            fail_errno(errno, path, "deleting");
        }
        return;
    }
    // O_PATH fds cannot be used with openat for reading; reopen the parent as a directory.
    UniqueFd parent_dir(openat2_in_root(root_, parent, O_RDONLY | O_DIRECTORY));
    if (!parent_dir) {
        fail_errno(errno, path, "deleting");
    }
    remove_tree(parent_dir.get(), name);
}

}  // namespace maf_sandbox::emulator
