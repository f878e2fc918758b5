// GuestFs: every file operation on a tree a sandbox or an image controls, resolved from one root
// descriptor without following a link out of it (openat2 RESOLVE_IN_ROOT, no-follow leaves). One
// concern, long because each operation checks its own leaf.
#include "maf_sandbox/runtime/kernel/guest_fs.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <memory>

#include "fd_ops.hpp"
#include "maf_sandbox/core/errors.hpp"
#include "maf_sandbox/core/paths.hpp"

namespace maf_sandbox::runtime {

namespace {

using detail::open_in_root;

// The components of an absolute guest path, normalised ("/" has none).
std::vector<std::string> components_of(std::string_view guest_path) {
    if (guest_path.find('\0') != std::string_view::npos) {
        throw ConfinementEscape("the guest path contains a NUL byte; remove it");
    }
    if (guest_path.empty() || guest_path.front() != '/') {
        throw InvalidArgument(fmt::format(
            "guest path '{}' is not absolute; confine it against the working directory first",
            guest_path));
    }
    std::vector<std::string> parts;
    const auto normal = normpath(guest_path);
    std::size_t start = 0;
    while (start <= normal.size()) {
        const auto end = std::min(normal.find('/', start), normal.size());
        const auto part = normal.substr(start, end - start);
        if (!part.empty() && part != ".") {
            if (part == "..") {
                throw ConfinementEscape(fmt::format(
                    "guest path '{}' climbs above the root; use a path inside it", guest_path));
            }
            parts.push_back(part);
        }
        start = end + 1;
    }
    return parts;
}

std::string join(const std::vector<std::string>& parts, std::size_t count) {
    std::string out;
    for (std::size_t i = 0; i < count && i < parts.size(); ++i) {
        if (!out.empty()) {
            out += '/';
        }
        out += parts[i];
    }
    return out;
}

std::string guest(const std::vector<std::string>& parts, std::size_t count) {
    return "/" + join(parts, count);
}

EntryKind kind_of(mode_t mode) {
    if (S_ISREG(mode)) {
        return EntryKind::file;
    }
    if (S_ISDIR(mode)) {
        return EntryKind::directory;
    }
    if (S_ISLNK(mode)) {
        return EntryKind::symlink;
    }
    return EntryKind::other;
}

std::optional<std::uint64_t> size_of(const struct stat& st) {
    if (S_ISREG(st.st_mode)) {
        return static_cast<std::uint64_t>(st.st_size);
    }
    return std::nullopt;
}

// Maps a failed operation on one guest path to the error family callers catch.
[[noreturn]] void throw_for(int error, const std::string& path, std::string_view doing) {
    switch (error) {
        case ENOENT:
            throw FileNotFound(
                fmt::format("'{}' does not exist in the sandbox ({}); check the path", path, doing),
                error);
        case ENOTDIR:
            throw NotADirectory(fmt::format("'{}': a component is not a directory ({}); check the "
                                            "path",
                                            path, doing),
                                error);
        case EISDIR:
            throw IsADirectory(fmt::format("'{}' is a directory ({}); name a file", path, doing),
                               error);
        case EACCES:
        case EPERM:
        case EROFS:
            // A file refusal and the protocol's permission-denied type at once, as on every
            // backend.
            throw SandboxFilePermissionRefused(
                fmt::format("'{}': permission denied ({}); the path belongs to the image or "
                            "another user",
                            path, doing),
                error);
        case ELOOP:
        case EXDEV:
            throw ConfinementEscape(
                fmt::format("'{}' goes through a link ({}); links are never "
                            "followed, name the real path",
                            path, doing));
        case ENOSPC:
        case EDQUOT:
            throw FileError(fmt::format("'{}': the sandbox's disk is full ({}); remove files or "
                                        "raise the disk limit",
                                        path, doing),
                            error);
        default:
            throw FileError(fmt::format("'{}': {} ({})", path, std::strerror(error), doing), error);
    }
}

// After a resolution failed, walks the prefix one component at a time (never following anything)
// to say precisely which component is a link or not a directory. Fails closed: a path that
// resolves fine now was still refused.
[[noreturn]] void classify_walk_failure(int root, const std::vector<std::string>& parts,
                                        std::size_t count, int error, std::string_view doing) {
    for (std::size_t i = 1; i <= count; ++i) {
        struct stat st {};
        const auto prefix = join(parts, i - 1);
        const int dir = open_in_root(root, prefix, O_PATH | O_DIRECTORY);
        if (dir < 0) {
            break;
        }
        UniqueFd dir_fd{dir};
        if (::fstatat(dir, parts[i - 1].c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
            break;
        }
        if (S_ISLNK(st.st_mode)) {
            throw ConfinementEscape(fmt::format(
                "'{}' is a link, so '{}' would leave the directory tree through it ({}); links are "
                "never followed, name the real path",
                guest(parts, i), guest(parts, parts.size()), doing));
        }
        if (!S_ISDIR(st.st_mode)) {
            throw NotADirectory(fmt::format("'{}' is not a directory, so '{}' cannot exist ({}); "
                                            "check the path",
                                            guest(parts, i), guest(parts, parts.size()), doing),
                                ENOTDIR);
        }
    }
    if (error == ELOOP) {
        throw ConfinementEscape(
            fmt::format("'{}' went through a link that changed during the "
                        "operation ({}); refused, retry with a stable path",
                        guest(parts, parts.size()), doing));
    }
    throw_for(error, guest(parts, parts.size()), doing);
}

// Opens the first `count` components as a directory. Returns an invalid fd when a component is
// missing; throws for a link or a non-directory.
UniqueFd open_dir(int root, const std::vector<std::string>& parts, std::size_t count, int flags,
                  std::string_view doing) {
    const int fd = open_in_root(root, join(parts, count), flags | O_DIRECTORY);
    if (fd >= 0) {
        return UniqueFd{fd};
    }
    if (fd == -ENOENT) {
        return UniqueFd{};
    }
    if (fd == -ELOOP || fd == -ENOTDIR || fd == -EXDEV) {
        classify_walk_failure(root, parts, count, -fd, doing);
    }
    throw_for(-fd, guest(parts, count), doing);
}

// One read(2): large enough that syscalls are a rounding error, small enough that the bytes are
// still in the L2 cache when they are appended.
constexpr std::size_t kReadChunk = 256u << 10;
constexpr std::size_t kSmallReadChunk = 16u << 10;

// A fault per 4 KiB page of the destination costs about as much as copying the page (more on a
// VM), so a large read asks for transparent huge pages on the part of its buffer they can cover:
// 512 times fewer faults. Advice only: where THP is off the call fails or does nothing, and the
// read is as before. Only from 32 MiB (glibc's largest dynamic mmap threshold), where malloc maps a
// buffer on its own by default, so the advice goes away with the buffer instead of staying on the
// shared heap.
constexpr std::size_t kHugePage = 2u << 20;
constexpr std::size_t kHugePagesFrom = 32u << 20;

void advise_huge_pages(char* data, std::size_t size) {
    if (size < kHugePagesFrom) {
        return;
    }
    const auto begin = reinterpret_cast<std::uintptr_t>(data);
    const auto first = (begin + kHugePage - 1) & ~std::uintptr_t{kHugePage - 1};
    const auto last = (begin + size) & ~std::uintptr_t{kHugePage - 1};
    if (last > first) {
        ::madvise(reinterpret_cast<void*>(first), last - first, MADV_HUGEPAGE);
    }
}

// Reads to end of file into a string reserved for `expected_size` (the size checked at open, never
// more than the cap), so a file that does not change is read without reallocation; one that grows
// or shrinks meanwhile is still read correctly, up to the cap. The bytes go through a small
// cache-resident buffer rather than straight into the string because a C++20 string cannot be sized
// without zero-filling it first (resize_and_overwrite is C++23), and that fill is one more pass
// over all of memory.
std::string read_all(int fd, const std::string& path, std::uint64_t expected_size,
                     std::uint64_t max_bytes,
                     std::optional<std::chrono::steady_clock::time_point> deadline) {
    std::string content;
    content.reserve(static_cast<std::size_t>(std::min(expected_size, max_bytes)));
    advise_huge_pages(content.data(), content.capacity());
    const std::size_t chunk = expected_size < kSmallReadChunk ? kSmallReadChunk : kReadChunk;
    const auto buffer = std::make_unique_for_overwrite<char[]>(chunk);
    for (;;) {
        if (deadline && std::chrono::steady_clock::now() >= *deadline) {
            throw Timeout(
                fmt::format("reading '{}' did not finish before its deadline; retry with "
                            "a longer timeout",
                            path));
        }
        const ssize_t got = ::read(fd, buffer.get(), chunk);
        if (got < 0) {
            if (errno == EINTR) {
                continue;
            }
            throw_for(errno, path, "reading");
        }
        if (got == 0) {
            return content;
        }
        if (content.size() + static_cast<std::uint64_t>(got) > max_bytes) {
            throw SandboxTransferCapExceeded(fmt::format(
                "'{}' grew past the {}-byte read cap while it was read; refused, not truncated: "
                "raise max_bytes or read it when it is finished",
                path, max_bytes));
        }
        content.append(buffer.get(), static_cast<std::size_t>(got));
    }
}

}  // namespace

GuestFs::GuestFs(UniqueFd root, GuestOwner owner) : root_(std::move(root)), owner_(owner) {}

GuestFs GuestFs::open(const std::filesystem::path& host_root, GuestOwner owner) {
    UniqueFd fd{::open(host_root.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC)};
    if (!fd) {
        throw SystemError(errno, fmt::format("opening sandbox root '{}'", host_root.string()),
                          "check that the sandbox still exists");
    }
    return GuestFs{std::move(fd), owner};
}

std::optional<GuestEntry> GuestFs::stat(std::string_view guest_path) const {
    const auto parts = components_of(guest_path);
    const std::string path = guest(parts, parts.size());
    if (parts.empty()) {
        return GuestEntry{path, EntryKind::directory, std::nullopt};
    }
    const auto parent = open_dir(root_.get(), parts, parts.size() - 1, O_PATH, "stat");
    if (!parent) {
        return std::nullopt;
    }
    struct stat st {};
    if (::fstatat(parent.get(), parts.back().c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
        if (errno == ENOENT) {
            return std::nullopt;
        }
        throw_for(errno, path, "stat");
    }
    return GuestEntry{path, kind_of(st.st_mode), size_of(st)};
}

std::string GuestFs::read(std::string_view guest_path, std::uint64_t max_bytes,
                          std::optional<std::chrono::steady_clock::time_point> deadline) const {
    const auto parts = components_of(guest_path);
    const std::string path = guest(parts, parts.size());
    if (parts.empty()) {
        throw_for(EISDIR, path, "reading");
    }
    const auto parent = open_dir(root_.get(), parts, parts.size() - 1, O_PATH, "reading");
    if (!parent) {
        throw_for(ENOENT, path, "reading");
    }
    // O_PATH opens nothing: no FIFO handshake, no device driver, just a handle to inspect.
    const int raw = open_in_root(parent.get(), parts.back(), O_PATH | O_NOFOLLOW);
    if (raw < 0) {
        throw_for(-raw, path, "reading");
    }
    UniqueFd handle{raw};
    struct stat st {};
    if (::fstat(handle.get(), &st) != 0) {
        throw_for(errno, path, "reading");
    }
    if (S_ISLNK(st.st_mode)) {
        throw FileError(fmt::format("'{}' is a link; links are never followed or read, read the "
                                    "file it names directly",
                                    path),
                        ELOOP);
    }
    if (S_ISDIR(st.st_mode)) {
        throw_for(EISDIR, path, "reading");
    }
    if (!S_ISREG(st.st_mode)) {
        throw FileError(fmt::format("'{}' is not a regular file (a FIFO, socket or device); only "
                                    "regular files are read",
                                    path),
                        EINVAL);
    }
    if (static_cast<std::uint64_t>(st.st_size) > max_bytes) {
        throw SandboxTransferCapExceeded(fmt::format(
            "'{}' is {} bytes, over the {}-byte read cap; refused, not truncated: raise max_bytes",
            path, st.st_size, max_bytes));
    }
    // Reopen the very inode we checked, through its handle: nothing swapped in since can be read.
    const auto self = fmt::format("/proc/self/fd/{}", handle.get());
    UniqueFd file{::open(self.c_str(), O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC)};
    if (!file) {
        throw_for(errno, path, "opening for reading");
    }
    struct stat again {};
    if (::fstat(file.get(), &again) != 0 || again.st_ino != st.st_ino ||
        again.st_dev != st.st_dev || !S_ISREG(again.st_mode)) {
        throw ConfinementEscape(
            fmt::format("'{}' changed while it was opened; refused, retry", path));
    }
    return read_all(file.get(), path, static_cast<std::uint64_t>(again.st_size), max_bytes,
                    deadline);
}

std::vector<GuestEntry> GuestFs::list(std::string_view guest_path) const {
    const auto parts = components_of(guest_path);
    const std::string path = guest(parts, parts.size());
    const auto dir = open_dir(root_.get(), parts, parts.size(), O_RDONLY, "listing");
    if (!dir) {
        throw_for(ENOENT, path, "listing");
    }
    const int copy = ::fcntl(dir.get(), F_DUPFD_CLOEXEC, 0);
    if (copy < 0) {
        throw_for(errno, path, "listing");
    }
    DIR* stream = ::fdopendir(copy);
    if (stream == nullptr) {
        const int error = errno;
        ::close(copy);
        throw_for(error, path, "listing");
    }
    std::vector<GuestEntry> entries;
    while (const dirent* entry = ::readdir(stream)) {
        const std::string_view name = entry->d_name;
        if (name == "." || name == "..") {
            continue;
        }
        struct stat st {};
        if (::fstatat(dir.get(), entry->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) {
            continue;  // removed since readdir saw it
        }
        entries.push_back(GuestEntry{std::string(name), kind_of(st.st_mode), size_of(st)});
    }
    ::closedir(stream);
    std::sort(entries.begin(), entries.end(),
              [](const GuestEntry& a, const GuestEntry& b) { return a.name < b.name; });
    return entries;
}

namespace {

// mkdir -p by directory fd; returns the last directory opened for reading.
UniqueFd make_dirs(int root, const std::vector<std::string>& parts, std::size_t count,
                   const GuestOwner& owner) {
    const int top = open_in_root(root, "", O_RDONLY | O_DIRECTORY);
    if (top < 0) {
        throw_for(-top, "/", "opening the sandbox root");
    }
    UniqueFd current{top};
    for (std::size_t i = 0; i < count; ++i) {
        const auto& name = parts[i];
        const bool created = ::mkdirat(current.get(), name.c_str(), 0755) == 0;
        if (!created && errno != EEXIST) {
            throw_for(errno, guest(parts, i + 1), "creating a directory");
        }
        const int next = open_in_root(current.get(), name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW);
        if (next < 0) {
            if (next == -ELOOP || next == -ENOTDIR) {
                classify_walk_failure(root, parts, i + 1, -next, "creating directories");
            }
            throw_for(-next, guest(parts, i + 1), "creating a directory");
        }
        current.reset(next);
        if (created) {
            if (::fchown(current.get(), owner.uid, owner.gid) != 0 ||
                ::fchmod(current.get(), 0755) != 0) {
                throw_for(errno, guest(parts, i + 1), "giving a new directory to the guest user");
            }
        }
    }
    return current;
}

// Unlinks the temporary sibling unless the rename consumed it.
class TempName {
  public:
    TempName(int dir, std::string name) : dir_(dir), name_(std::move(name)) {}
    TempName(const TempName&) = delete;
    TempName& operator=(const TempName&) = delete;
    ~TempName() {
        if (!name_.empty()) {
            ::unlinkat(dir_, name_.c_str(), 0);
        }
    }
    void keep() noexcept { name_.clear(); }
    const std::string& name() const noexcept { return name_; }

  private:
    int dir_;
    std::string name_;
};

}  // namespace

void GuestFs::write(std::string_view guest_path, std::string_view content,
                    GuestWriteOptions options) const {
    const auto parts = components_of(guest_path);
    const std::string path = guest(parts, parts.size());
    if (parts.empty()) {
        throw InvalidArgument("cannot write to the sandbox root '/'; name a file");
    }
    const auto parent = make_dirs(root_.get(), parts, parts.size() - 1, owner_);
    const auto& name = parts.back();
    struct stat st {};
    if (::fstatat(parent.get(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0) {
        if (S_ISLNK(st.st_mode) && !options.replace_link) {
            throw ConfinementEscape(
                fmt::format("'{}' is a link; writing through a link is refused, "
                            "remove it or name the real path",
                            path));
        }
        if (S_ISDIR(st.st_mode)) {
            throw_for(EISDIR, path, "writing");
        }
    } else if (errno != ENOENT) {
        throw_for(errno, path, "writing");
    }
    TempName temp{parent.get(), ".maf-tmp-" + detail::random_hex(8)};
    UniqueFd file{::openat(parent.get(), temp.name().c_str(),
                           O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600)};
    if (!file) {
        temp.keep();  // nothing was created
        throw_for(errno, path, "creating a temporary file");
    }
    if (const int error = detail::write_all(file.get(), content); error != 0) {
        throw_for(error, path, "writing");
    }
    // chown first: it clears set-id bits, and the mode we apply afterwards is exactly the caller's.
    if (::fchown(file.get(), owner_.uid, owner_.gid) != 0 ||
        ::fchmod(file.get(), options.mode) != 0) {
        throw_for(errno, path, "giving the file to the guest user");
    }
    if (options.fsync && ::fsync(file.get()) != 0) {
        throw_for(errno, path, "syncing");
    }
    file.reset();
    // renameat replaces a name, never follows it: a link swapped in is replaced, not written into.
    if (::renameat(parent.get(), temp.name().c_str(), parent.get(), name.c_str()) != 0) {
        throw_for(errno, path, "renaming into place");
    }
    temp.keep();
}

void GuestFs::mkdirs(std::string_view guest_path) const {
    make_directory(guest_path);
}

UniqueFd GuestFs::make_directory(std::string_view guest_path) const {
    const auto parts = components_of(guest_path);
    return make_dirs(root_.get(), parts, parts.size(), owner_);
}

UniqueFd GuestFs::mount_point(std::string_view guest_path, bool directory) const {
    const auto parts = components_of(guest_path);
    const std::string path = guest(parts, parts.size());
    if (directory || parts.empty()) {
        return make_dirs(root_.get(), parts, parts.size(), owner_);
    }
    const auto parent = make_dirs(root_.get(), parts, parts.size() - 1, owner_);
    const auto& name = parts.back();
    // O_EXCL | O_NOFOLLOW: a name that appeared meanwhile (a link included) fails the create
    // and is then inspected below, never opened through.
    if (UniqueFd made{::openat(parent.get(), name.c_str(),
                               O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644)}) {
        if (::fchown(made.get(), owner_.uid, owner_.gid) != 0 || ::fchmod(made.get(), 0644) != 0) {
            throw_for(errno, path, "giving a mount point to its owner");
        }
    } else if (errno != EEXIST) {
        throw_for(errno, path, "creating a mount point");
    }
    const int raw = open_in_root(parent.get(), name, O_PATH | O_NOFOLLOW);
    if (raw < 0) {
        throw_for(-raw, path, "opening a mount point");
    }
    UniqueFd handle{raw};
    struct stat st {};
    if (::fstat(handle.get(), &st) != 0) {
        throw_for(errno, path, "opening a mount point");
    }
    if (S_ISLNK(st.st_mode)) {
        throw ConfinementEscape(fmt::format(
            "'{}' is a link where a file is needed; links are never followed, remove it", path));
    }
    if (S_ISDIR(st.st_mode)) {
        throw_for(EISDIR, path, "opening a file mount point");
    }
    if (!S_ISREG(st.st_mode)) {
        throw FileError(
            fmt::format("'{}' is a FIFO, socket or device where a regular file is needed", path),
            EINVAL);
    }
    return handle;
}

namespace {

// Removes whatever is at `name` in `parent` (never following it; a directory with everything in
// it), unless it is a directory and `keep_directory`. Returns true when a directory was kept.
bool clear_name(int parent, const std::string& name, bool keep_directory, const std::string& path) {
    struct stat st {};
    if (::fstatat(parent, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
        if (errno == ENOENT) {
            return false;
        }
        throw_for(errno, path, "replacing");
    }
    if (S_ISDIR(st.st_mode)) {
        if (keep_directory) {
            return true;
        }
        try {
            detail::remove_tree_at(parent, name, false, fmt::format("'{}'", path));
        } catch (const SystemError& e) {
            throw_for(e.error_number(), path, "replacing a directory");
        }
        return false;
    }
    if (::unlinkat(parent, name.c_str(), 0) != 0 && errno != ENOENT) {
        throw_for(errno, path, "replacing");
    }
    return false;
}

}  // namespace

void GuestFs::symlink(std::string_view guest_path, const std::string& target, bool replace) const {
    const auto parts = components_of(guest_path);
    const std::string path = guest(parts, parts.size());
    if (parts.empty()) {
        throw InvalidArgument("cannot make the sandbox root '/' a link");
    }
    const auto parent = make_dirs(root_.get(), parts, parts.size() - 1, owner_);
    if (replace) {
        clear_name(parent.get(), parts.back(), false, path);
    }
    if (::symlinkat(target.c_str(), parent.get(), parts.back().c_str()) != 0 && errno != EEXIST) {
        throw_for(errno, path, "creating a link");
    }
    if (replace) {
        // The link itself, through a descriptor of it (AT_EMPTY_PATH on O_PATH | O_NOFOLLOW).
        const int raw = open_in_root(parent.get(), parts.back(), O_PATH | O_NOFOLLOW);
        if (raw < 0) {
            throw_for(-raw, path, "opening a new link");
        }
        UniqueFd link{raw};
        if (::fchownat(link.get(), "", owner_.uid, owner_.gid, AT_EMPTY_PATH) != 0) {
            throw_for(errno, path, "giving a link to its owner");
        }
    }
}

UniqueFd GuestFs::create_file(std::string_view guest_path, mode_t mode) const {
    const auto parts = components_of(guest_path);
    const std::string path = guest(parts, parts.size());
    if (parts.empty()) {
        throw InvalidArgument("cannot replace the sandbox root '/' with a file");
    }
    const auto parent = make_dirs(root_.get(), parts, parts.size() - 1, owner_);
    clear_name(parent.get(), parts.back(), false, path);
    UniqueFd file{::openat(parent.get(), parts.back().c_str(),
                           O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600)};
    if (!file) {
        throw_for(errno, path, "creating a file");
    }
    if (::fchown(file.get(), owner_.uid, owner_.gid) != 0 || ::fchmod(file.get(), mode) != 0) {
        throw_for(errno, path, "giving a new file to its owner");
    }
    return file;
}

UniqueFd GuestFs::replace_with_directory(std::string_view guest_path) const {
    const auto parts = components_of(guest_path);
    if (parts.empty()) {
        return make_dirs(root_.get(), parts, 0, owner_);
    }
    const auto parent = make_dirs(root_.get(), parts, parts.size() - 1, owner_);
    clear_name(parent.get(), parts.back(), true, guest(parts, parts.size()));
    return make_dirs(root_.get(), parts, parts.size(), owner_);
}

void GuestFs::hard_link(std::string_view guest_path, std::string_view existing) const {
    const auto parts = components_of(guest_path);
    const auto from = components_of(existing);
    const std::string path = guest(parts, parts.size());
    if (parts.empty() || from.empty()) {
        throw InvalidArgument(
            fmt::format("a hard link between '{}' and '{}' names the root", path, existing));
    }
    const auto from_parent = open_dir(root_.get(), from, from.size() - 1, O_PATH, "hard linking");
    if (!from_parent) {
        throw_for(ENOENT, guest(from, from.size()), "hard linking");
    }
    const auto parent = make_dirs(root_.get(), parts, parts.size() - 1, owner_);
    if (parts == from) {
        return;  // a link to itself: already there
    }
    clear_name(parent.get(), parts.back(), false, path);
    // Flags 0: a final link is linked itself, never followed.
    if (::linkat(from_parent.get(), from.back().c_str(), parent.get(), parts.back().c_str(), 0) !=
        0) {
        throw_for(errno, path, "creating a hard link");
    }
}

void GuestFs::remove(std::string_view guest_path, bool recursive) const {
    const auto parts = components_of(guest_path);
    const std::string path = guest(parts, parts.size());
    if (parts.empty()) {
        throw InvalidArgument("refusing to remove the sandbox root '/'; name a path inside it");
    }
    const auto parent = open_dir(root_.get(), parts, parts.size() - 1, O_PATH, "removing");
    if (!parent) {
        return;
    }
    const auto& name = parts.back();
    struct stat st {};
    if (::fstatat(parent.get(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
        if (errno == ENOENT) {
            return;
        }
        throw_for(errno, path, "removing");
    }
    const auto remove_directory = [&] {
        if (!recursive) {
            throw IsADirectory(fmt::format("'{}' is a directory; pass recursive to remove it and "
                                           "everything in it",
                                           path),
                               EISDIR);
        }
        try {
            detail::remove_tree_at(parent.get(), name, false, fmt::format("'{}'", path));
        } catch (const SystemError& e) {
            throw_for(e.error_number(), path, "removing recursively");
        }
    };
    if (S_ISDIR(st.st_mode)) {
        remove_directory();
        return;
    }
    if (::unlinkat(parent.get(), name.c_str(), 0) != 0) {
        if (errno == ENOENT) {
            return;
        }
        if (errno == EISDIR) {
            remove_directory();
            return;
        }
        throw_for(errno, path, "removing");
    }
}

}  // namespace maf_sandbox::runtime
