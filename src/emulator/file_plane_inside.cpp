// One concern: the file plane's operations as they run inside the guest-authority child (the
// header says how they resolve and what they refuse).
#include "file_plane_inside.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <linux/magic.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <fmt/format.h>
#include <algorithm>
#include <boost/json/array.hpp>
#include <boost/json/serialize.hpp>
#include <cerrno>
#include <cstring>
#include <vector>

#include "file_plane_staging.hpp"
#include "maf_sandbox/core/utf8.hpp"
#include "maf_sandbox/runtime/kernel/unique_fd.hpp"

namespace maf_sandbox::emulator::inside {
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
            throw Refusal{404, "FileNotFound", fmt::format("The path '{}' does not exist.", path)};
        case ENOTDIR:
            throw Refusal{400, "NotADirectory",
                          fmt::format("A component of '{}' is not a directory.", path)};
        case EISDIR:
            throw Refusal{400, "PathIsDirectory", fmt::format("'{}' is a directory.", path)};
        case ENOTEMPTY:
        case EEXIST:
            throw Refusal{409, "DirectoryNotEmpty",
                          fmt::format("'{}' is not empty; pass recursive=true.", path)};
        case ELOOP:
            // RESOLVE_NO_MAGICLINKS refuses /proc/<pid>/root and the like; or a link loop.
            throw Refusal{400, "InvalidPath",
                          fmt::format("'{}' goes through a symbolic link loop or a /proc magic "
                                      "link, which the file API does not follow.",
                                      path)};
        case ENAMETOOLONG:
            throw Refusal{400, "InvalidPath", fmt::format("The path '{}' is too long.", path)};
        case EXDEV:
            throw Refusal{400, "InvalidPath",
                          fmt::format("The path '{}' leaves the sandbox's file system.", path)};
        case EACCES:
        case EPERM:
            // The guest's own permissions (this runs as its root): e.g. /proc/1/root of its
            // PID 1, which is not dumpable. 400, not 403: ACAS clients read a 403 as a role
            // assignment still propagating and retry it for minutes.
            throw Refusal{400, "PermissionDenied",
                          fmt::format("Permission denied while {} '{}'.", doing, path)};
        case ENOSPC:
        case EDQUOT:
            throw Refusal{507, "InsufficientStorage",
                          fmt::format("No space left while {} '{}'.", doing, path)};
        default:
            // strerrordesc_np: no locale lookup (this runs in a child sharing a process of many
            // threads).
            throw Refusal{500, "FileOperationFailed",
                          fmt::format("{} '{}' failed: {}", doing, path, ::strerrordesc_np(error))};
    }
}

// The guest's root: `/` of this process (guest_authority.cpp rooted it there).
UniqueFd open_root() {
    UniqueFd root(::open("/", O_PATH | O_DIRECTORY | O_CLOEXEC));
    if (!root) {
        fail_errno(errno, "/", "opening");
    }
    return root;
}

// --- What the plane never reaches -----------------------------------------------------------

// File systems that are the kernel's interfaces rather than the guest's files.
bool kernel_file_system(std::uint64_t magic) {
    constexpr std::uint64_t kMqueueMagic = 0x19800202;
    constexpr std::uint64_t kPidfsMagic = 0x50494446;
    constexpr std::uint64_t kFusectlMagic = 0x65735543;
    constexpr std::uint64_t kConfigfsMagic = 0x62656570;
    for (const std::uint64_t m :
         {std::uint64_t{PROC_SUPER_MAGIC}, std::uint64_t{SYSFS_MAGIC},
          std::uint64_t{DEVPTS_SUPER_MAGIC}, std::uint64_t{CGROUP_SUPER_MAGIC},
          std::uint64_t{CGROUP2_SUPER_MAGIC}, std::uint64_t{SECURITYFS_MAGIC},
          std::uint64_t{DEBUGFS_MAGIC}, std::uint64_t{TRACEFS_MAGIC}, std::uint64_t{BPF_FS_MAGIC},
          std::uint64_t{BINFMTFS_MAGIC}, std::uint64_t{PSTOREFS_MAGIC},
          std::uint64_t{EFIVARFS_MAGIC}, std::uint64_t{SELINUX_MAGIC}, std::uint64_t{NSFS_MAGIC},
          kMqueueMagic, kPidfsMagic, kFusectlMagic, kConfigfsMagic}) {
        if (magic == m) {
            return true;
        }
    }
    return false;
}

std::optional<std::uint64_t> mount_id(int dir, const char* path, int flags) {
    struct statx sx {};
    if (::statx(dir, path, flags, STATX_MNT_ID, &sx) != 0 || (sx.stx_mask & STATX_MNT_ID) == 0) {
        return std::nullopt;
    }
    return sx.stx_mnt_id;
}

// The mount of the guest's /dev (a tmpfs of device nodes the runtime built), when /dev is a mount
// of its own. Looked up on every check rather than kept in a static: a static's guard is a lock,
// and this runs in a child sharing the memory of a process of many threads.
std::optional<std::uint64_t> dev_mount() {
    const auto dev = mount_id(AT_FDCWD, "/dev", AT_SYMLINK_NOFOLLOW);
    const auto root = mount_id(AT_FDCWD, "/", 0);
    return dev && dev != root ? dev : std::nullopt;
}

[[noreturn]] void not_allowed(std::string_view path) {
    throw Refusal{400, "PathNotAllowed",
                  fmt::format("'{}' is (or goes through) the sandbox's /proc, /sys or /dev, or "
                              "is a device, which the file API does not reach; use "
                              "executeShellCommand for those.",
                              path)};
}

// Refuses `fd` (already opened: this checks what was really reached, not a name) when it is on
// a kernel file system, on the guest's /dev, or is a device node.
void require_guest_file(int fd, std::string_view path) {
    struct statfs fs {};
    struct stat st {};
    if (::fstatfs(fd, &fs) != 0 || ::fstat(fd, &st) != 0) {
        fail_errno(errno, path, "checking");
    }
    if (kernel_file_system(static_cast<std::uint64_t>(fs.f_type)) || S_ISCHR(st.st_mode) ||
        S_ISBLK(st.st_mode)) {
        not_allowed(path);
    }
    if (const auto dev = dev_mount(); dev && mount_id(fd, "", AT_EMPTY_PATH) == dev) {
        not_allowed(path);
    }
}

// openat2 from the root, then require_guest_file; fails with the errno's Refusal.
UniqueFd open_checked(int root, const std::string& path, int flags, std::string_view doing) {
    UniqueFd fd(openat2_in_root(root, path, flags));
    if (!fd) {
        fail_errno(errno, path, doing);
    }
    require_guest_file(fd.get(), path);
    return fd;
}

// --- Path arithmetic and JSON ----------------------------------------------------------------

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

// The target of the link `name` in `dir` ("" with an O_PATH|O_NOFOLLOW fd on the link itself).
std::optional<std::string> link_target(int dir, const std::string& name) {
    std::vector<char> buffer(4096);
    const auto n = ::readlinkat(dir, name.c_str(), buffer.data(), buffer.size());
    if (n < 0) {
        return std::nullopt;
    }
    return std::string(buffer.data(), static_cast<std::size_t>(n));
}

// Removes the directory `name` in `parent` and everything beneath it, by descriptor, never
// following a link (O_NOFOLLOW; a link is unlinked), and never into a kernel file system.
void remove_tree(int parent, const std::string& name, const std::string& shown) {
    const int fd = ::openat(parent, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
        fail_errno(errno, shown, "opening");
    }
    DIR* dir = ::fdopendir(fd);
    if (dir == nullptr) {
        ::close(fd);
        fail_errno(errno, shown, "listing");
    }
    struct Close {
        DIR* d;
        ~Close() { ::closedir(d); }
    } closer{dir};
    require_guest_file(::dirfd(dir), shown);
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
        const std::string child_shown = shown + "/" + child;
        if (is_dir) {
            remove_tree(::dirfd(dir), child, child_shown);
        } else if (::unlinkat(::dirfd(dir), child.c_str(), 0) != 0 && errno != ENOENT) {
            fail_errno(errno, child_shown, "removing");
        }
    }
    if (::unlinkat(parent, name.c_str(), AT_REMOVEDIR) != 0 && errno != ENOENT) {
        fail_errno(errno, shown, "removing");
    }
}

void write_all(int fd, std::string_view content, const std::string& path) {
    std::size_t done = 0;
    while (done < content.size()) {
        const auto n = ::write(fd, content.data() + done, content.size() - done);
        if (n < 0) {
            if (errno == EINTR) {
                continue;
            }
            fail_errno(errno, path, "writing");
        }
        done += static_cast<std::size_t>(n);
    }
}

// Writes into the file the guest's links lead to, truncating it first: for what has no content to
// replace atomically (a FIFO), and for a directory the guest's root cannot create a file in.
void write_in_place(int root, const std::string& path, std::string_view content,
                    std::optional<mode_t> mode) {
    // Checked before the open for writing, and what was opened is checked again.
    open_checked(root, path, O_PATH, "writing");
    auto fd = open_checked(root, path, O_WRONLY | O_NONBLOCK | O_NOCTTY, "writing");
    struct stat st {};
    if (::fstat(fd.get(), &st) != 0) {
        fail_errno(errno, path, "writing");
    }
    if (S_ISREG(st.st_mode) && ::ftruncate(fd.get(), 0) != 0) {
        fail_errno(errno, path, "writing");
    }
    write_all(fd.get(), content, path);
    if (mode && ::fchmod(fd.get(), *mode) != 0) {
        fail_errno(errno, path, "setting the mode of");
    }
}

// Where a write lands: the directory and name of the final entry once a final link (or a chain
// of them) is followed the way the guest's open would follow it, and what is there now.
struct WriteTarget {
    UniqueFd dir;
    std::string name;
    std::optional<struct stat> existing;
};

WriteTarget resolve_write_target(int root, UniqueFd dir, std::string name,
                                 const std::string& shown) {
    constexpr int kMaxLinks = 40;  // the kernel's own bound on links followed in one lookup
    std::string dir_path = split(shown).first;
    for (int links = 0;; ++links) {
        struct stat st {};
        if (::fstatat(dir.get(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
            if (errno != ENOENT) {
                fail_errno(errno, shown, "writing");
            }
            if (links > 0) {
                // A dangling link: refused as before, never a file made where it points.
                fail_errno(ENOENT, shown, "writing");
            }
            return {std::move(dir), std::move(name), std::nullopt};
        }
        if (!S_ISLNK(st.st_mode)) {
            if (S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode)) {
                not_allowed(shown);
            }
            return {std::move(dir), std::move(name), st};
        }
        if (links == kMaxLinks) {
            fail_errno(ELOOP, shown, "writing");
        }
        const auto target = link_target(dir.get(), name);
        if (!target || target->empty()) {
            fail_errno(ENOENT, shown, "writing");
        }
        // RESOLVE_IN_ROOT reads an absolute target against the guest's root, as the guest would.
        const std::string next =
            target->front() == '/' ? *target : (dir_path == "/" ? "" : dir_path) + "/" + *target;
        auto [next_parent, next_name] = split(next);
        if (next_name.empty() || next_name == "." || next_name == "..") {
            fail_errno(EISDIR, shown, "writing");
        }
        UniqueFd next_dir(openat2_in_root(root, next_parent, O_PATH | O_DIRECTORY));
        if (!next_dir) {
            fail_errno(errno, shown, "writing");
        }
        require_guest_file(next_dir.get(), shown);
        dir = std::move(next_dir);
        name = std::move(next_name);
        dir_path = std::move(next_parent);
    }
}

// The bytes go to a staged sibling, made complete (mode, owner, fsync) before one rename puts it
// in place: a reader sees the old content or the new, never a mix, and a write that fails (no
// space, a quota) removes the sibling and leaves the old file whole. Returns false, having
// changed nothing, when the guest's root may not create a file in that directory.
bool write_staged(const staging::StageKey& key, WriteTarget target, const std::string& path,
                  std::string_view content, std::optional<mode_t> mode) {
    // No concurrent write picks the same name: this child's pid (each file operation is its own
    // process) and random bits, tagged so that a leftover is recognised as ours.
    const auto staged = staging::new_staged_name(key);
    UniqueFd fd(::openat(target.dir.get(), staged.c_str(),
                         O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_NOCTTY | O_CLOEXEC, 0600));
    if (!fd) {
        if ((errno == EACCES || errno == EPERM) && target.existing) {
            return false;
        }
        fail_errno(errno, path, "writing");
    }
    struct Staged {
        int dir;
        const std::string& name;
        bool placed = false;
        ~Staged() {
            if (!placed) {
                ::unlinkat(dir, name.c_str(), 0);
            }
        }
    } sibling{target.dir.get(), staged};
    write_all(fd.get(), content, path);
    if (target.existing) {
        // The replaced file's owner, so an overwrite changes only the content. An owner the
        // sandbox does not map cannot be given; the file is then the guest's root's, as a new one.
        if (::fchown(fd.get(), target.existing->st_uid, target.existing->st_gid) != 0 &&
            errno != EINVAL && errno != EPERM) {
            fail_errno(errno, path, "writing");
        }
    }
    // After the chown, which clears set-id bits.
    const mode_t bits =
        mode.value_or(target.existing ? target.existing->st_mode & 07777 : mode_t{0644});
    if (::fchmod(fd.get(), bits) != 0) {
        fail_errno(errno, path, "setting the mode of");
    }
    if (::fsync(fd.get()) != 0) {
        fail_errno(errno, path, "writing");
    }
    if (::renameat(target.dir.get(), staged.c_str(), target.dir.get(), target.name.c_str()) != 0) {
        fail_errno(errno, path, "writing");
    }
    sibling.placed = true;
    // Staged siblings an interrupted write left here (a crash between staging and the rename)
    // go with the next write to the directory.
    staging::sweep_leftovers(key, target.dir.get(), staged);
    return true;
}

}  // namespace

ReadKind classify_read(const std::string& path) {
    const auto root = open_root();
    const auto fd = open_checked(root.get(), path, O_PATH, "reading");
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
        throw Refusal{400, "NotARegularFile", fmt::format("'{}' is not a regular file.", path)};
    }
    return ReadKind::regular;
}

void open_for_read(const std::string& path, std::uint64_t max_bytes, ReplyChannel& out) {
    const auto root = open_root();
    // Checked before the open that reads (an open can have effects on special files), and the
    // descriptor read from is checked again: the guest may have swapped a link in between.
    open_checked(root.get(), path, O_PATH, "reading");
    // O_NONBLOCK: a FIFO swapped in after classify_read must not block.
    const auto fd = open_checked(root.get(), path, O_RDONLY | O_NONBLOCK | O_NOCTTY, "reading");
    struct stat st {};
    if (::fstat(fd.get(), &st) != 0) {
        fail_errno(errno, path, "reading");
    }
    if (S_ISDIR(st.st_mode)) {
        fail_errno(EISDIR, path, "reading");
    }
    if (!S_ISREG(st.st_mode)) {
        throw Refusal{400, "NotARegularFile", fmt::format("'{}' is not a regular file.", path)};
    }
    if (static_cast<std::uint64_t>(st.st_size) > max_bytes) {
        throw Refusal{413, "FileTooLarge",
                      fmt::format("'{}' is larger than {} bytes.", path, max_bytes)};
    }
    // The caller reads the descriptor itself, in pieces: it is a checked regular file, so
    // reading it needs no name and no authority.
    out.descriptor(fd.get());
    out.done(std::to_string(st.st_size));
}

void mkdir(const std::string& path) {
    const auto root = open_root();
    UniqueFd current(::fcntl(root.get(), F_DUPFD_CLOEXEC, 0));
    std::string prefix;
    std::size_t start = 1;
    while (start <= path.size()) {
        auto end = path.find('/', start);
        if (end == std::string::npos) {
            end = path.size();
        }
        const std::string component = path.substr(start, end - start);
        start = end + 1;
        if (component.empty() || component == ".") {
            continue;
        }
        prefix += "/" + component;
        UniqueFd existing(openat2_in_root(root.get(), prefix, O_PATH | O_DIRECTORY));
        if (existing) {
            require_guest_file(existing.get(), prefix);
            current = std::move(existing);
            continue;
        }
        if (errno != ENOENT) {
            fail_errno(errno, prefix, "creating");
        }
        // Made in the directory already resolved and checked, as the guest's root (so owned by
        // it) with the umask cleared: no metadata call by name follows.
        if (::mkdirat(current.get(), component.c_str(), 0755) != 0 && errno != EEXIST) {
            fail_errno(errno, prefix, "creating");
        }
        UniqueFd made(::openat(current.get(), component.c_str(),
                               O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
        if (!made) {
            fail_errno(errno, prefix, "creating");
        }
        current = std::move(made);
    }
}

void write(const staging::StageKey& key, const std::string& path, std::string_view content,
           bool create_dirs, std::optional<mode_t> mode) {
    const auto [parent, name] = split(path);
    if (name.empty()) {
        fail_errno(EISDIR, path, "writing");
    }
    if (create_dirs) {
        mkdir(parent);
    }
    const auto root = open_root();
    UniqueFd dir(openat2_in_root(root.get(), parent, O_PATH | O_DIRECTORY));
    if (!dir) {
        if (errno == ENOENT) {
            throw Refusal{404, "DirectoryNotFound",
                          fmt::format("The parent directory of '{}' does not exist; pass "
                                      "createDirs=true.",
                                      path)};
        }
        fail_errno(errno, path, "writing");
    }
    require_guest_file(dir.get(), path);
    auto target = resolve_write_target(root.get(), std::move(dir), name, path);
    if (target.existing && !S_ISREG(target.existing->st_mode)) {
        // A FIFO (or other non-regular file the guest made) has no content to replace.
        write_in_place(root.get(), path, content, mode);
        return;
    }
    const auto kept = target.existing;
    if (!write_staged(key, std::move(target), path, content, mode) && kept) {
        // The guest's root may write this file but not its directory (a directory of the image
        // whose owner no sandbox maps): written in place, as the guest itself would.
        write_in_place(root.get(), path, content, mode);
    }
}

std::string stat(const std::string& path) {
    const auto root = open_root();
    const auto [parent, name] = split(path);
    struct stat st {};
    std::optional<std::string> target;
    if (name.empty()) {
        if (::fstat(root.get(), &st) != 0) {
            fail_errno(errno, path, "stat");
        }
    } else {
        UniqueFd dir(openat2_in_root(root.get(), parent, O_PATH | O_DIRECTORY));
        if (!dir) {
            fail_errno(errno == ENOTDIR ? ENOENT : errno, path, "stat");
        }
        // No kernel-file-system check here: stat describes one entry, as the guest's root sees
        // it, and reads or writes nothing. Clients walk a path's ancestors by stat (the ACAS
        // backend's link check), so /proc itself and /proc/self must be describable.
        // The final component itself, a link included (described, not followed).
        UniqueFd fd(::openat(dir.get(), name.c_str(), O_PATH | O_NOFOLLOW | O_CLOEXEC));
        if (!fd) {
            fail_errno(errno, path, "stat");
        }
        if (::fstat(fd.get(), &st) != 0) {
            fail_errno(errno, path, "stat");
        }
        if (S_ISLNK(st.st_mode)) {
            target = link_target(fd.get(), "");
        }
    }
    return json::serialize(entry_json(name.empty() ? "/" : name, path, st, target));
}

std::string list(const std::string& path, const ListCaps& caps) {
    const auto root = open_root();
    auto fd = open_checked(root.get(), path, O_RDONLY | O_DIRECTORY, "listing");
    DIR* dir = ::fdopendir(fd.get());
    if (dir == nullptr) {
        fail_errno(errno, path, "listing");
    }
    fd.release();
    struct Close {
        DIR* d;
        ~Close() { ::closedir(d); }
    } closer{dir};
    const auto too_large = [&](std::string_view what) {
        return Refusal{
            413, "ListingTooLarge",
            fmt::format("The directory '{}' has more than {}, the emulator's cap on a "
                        "listing ({} entries, {} bytes); list a subdirectory, or raise "
                        "--max-list-entries / --max-list-bytes.",
                        replace_invalid_utf8(path), what, caps.max_entries, caps.max_bytes)};
    };
    std::string base = path;
    while (base.size() > 1 && base.back() == '/') {
        base.pop_back();
    }
    const std::string prefix = base == "/" ? "" : base;
    // Counted as the names arrive, before anything else is built: the guest sizes the
    // directory. A name costs at least itself twice in the answer (name and path).
    std::vector<std::string> names;
    std::uint64_t name_bytes = 0;
    while (auto* e = ::readdir(dir)) {
        const std::string_view name = e->d_name;
        if (name == "." || name == "..") {
            continue;
        }
        if (names.size() >= caps.max_entries) {
            throw too_large(fmt::format("{} entries", caps.max_entries));
        }
        name_bytes += 2 * name.size() + prefix.size() + 1;
        if (name_bytes > caps.max_bytes) {
            throw too_large(fmt::format("{} bytes of names", caps.max_bytes));
        }
        names.emplace_back(name);
    }
    std::sort(names.begin(), names.end());
    // The answer is written entry by entry and measured as it grows (link targets and escapes
    // add to what the names cost).
    std::string out = json::serialize(json::object{{"path", replace_invalid_utf8(path)}});
    out.pop_back();  // the closing brace
    out += ",\"entries\":[";
    bool first = true;
    for (const auto& name : names) {
        struct stat st {};
        if (::fstatat(::dirfd(dir), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
            continue;  // vanished while listing
        }
        std::optional<std::string> target;
        if (S_ISLNK(st.st_mode)) {
            target = link_target(::dirfd(dir), name);
        }
        if (!first) {
            out += ',';
        }
        first = false;
        out += json::serialize(entry_json(name, prefix + "/" + name, st, target));
        if (out.size() + 2 > caps.max_bytes) {
            throw too_large(fmt::format("{} bytes of answer", caps.max_bytes));
        }
    }
    out += "]}";
    return out;
}

void remove(const std::string& path, bool recursive) {
    const auto [parent, name] = split(path);
    if (name.empty()) {
        throw Refusal{400, "InvalidPath", "The root directory cannot be deleted."};
    }
    const auto root = open_root();
    // O_RDONLY (not O_PATH): remove_tree opens children relative to it.
    UniqueFd dir(openat2_in_root(root.get(), parent, O_RDONLY | O_DIRECTORY));
    if (!dir) {
        fail_errno(errno == ENOTDIR ? ENOENT : errno, path, "deleting");
    }
    require_guest_file(dir.get(), path);
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
    remove_tree(dir.get(), name, path);
}

}  // namespace maf_sandbox::emulator::inside
