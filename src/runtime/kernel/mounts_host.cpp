// The host half of the sandbox's root file system: the supervisor's host-side half builds it (real
// root, in a private mount namespace, so nothing appears on the host) before the clone; PID 1
// enters it (mounts_inside.cpp). The writable layer is a tmpfs whose size is the disk limit: a
// write beyond it fails with ENOSPC inside the guest, and the memory vanishes with the last
// namespace reference.
#include <fcntl.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include <fmt/format.h>

#include "maf_sandbox/core/errors.hpp"
#include "maf_sandbox/runtime/kernel/guest_fs.hpp"
#include "maf_sandbox/runtime/kernel/mounts.hpp"
#include "maf_sandbox/runtime/kernel/unique_fd.hpp"

namespace maf_sandbox::runtime {

namespace fs = std::filesystem;

namespace {

// The character devices a guest gets, as the kernel numbers them (Documentation/admin-guide/
// devices.txt): fixed numbers, the same on every Linux host.
struct Device {
    const char* name;
    unsigned major;
    unsigned minor;
};
constexpr Device kDevices[] = {{"null", 1, 3},   {"zero", 1, 5},    {"full", 1, 7},
                               {"random", 1, 8}, {"urandom", 1, 9}, {"tty", 5, 0}};

// A tmpfs's inode count is not bounded by its size (an empty file takes no page), and every inode
// is kernel memory charged to the sandbox: without a count, creating empty files until the memory
// limit starves the sandbox's own supervisor. One inode per 8 KiB of size (at least 4096) leaves
// room for a 100,000-file tree in the default 2 GiB layer.
std::uint64_t inodes_for(std::uint64_t bytes) {
    return std::max<std::uint64_t>(bytes / 8192, 4096);
}

[[noreturn]] void mount_failed(std::string_view doing) {
    throw SystemError(errno, std::string(doing),
                      "run as root on a kernel with overlayfs, tmpfs and the new mount API (5.2+)");
}

// --- the new mount API: every mount is made detached and attached onto a descriptor -------------
//
// A mount placed by name would follow whatever link an image planted at the mount point. Here a
// mount point is only ever an O_PATH descriptor GuestFs opened without following anything, and
// move_mount(..., MOVE_MOUNT_T_EMPTY_PATH) attaches onto exactly that inode.

// A new detached file system (tmpfs, overlay) configured with `options`; returns its mount fd.
UniqueFd new_mount(const char* type,
                   const std::vector<std::pair<std::string, std::string>>& options,
                   unsigned attributes, std::string_view describe) {
    UniqueFd context{::fsopen(type, FSOPEN_CLOEXEC)};
    if (!context) {
        mount_failed(fmt::format("opening a {} file system for {}", type, describe));
    }
    // The source shows in mountinfo (and df); as mount(8) would name these file systems.
    if (::fsconfig(context.get(), FSCONFIG_SET_STRING, "source", type, 0) != 0) {
        mount_failed(fmt::format("naming the {} of {}", type, describe));
    }
    for (const auto& [key, value] : options) {
        if (::fsconfig(context.get(), FSCONFIG_SET_STRING, key.c_str(), value.c_str(), 0) != 0) {
            mount_failed(fmt::format("setting {}={} on the {} of {}", key, value, type, describe));
        }
    }
    if (::fsconfig(context.get(), FSCONFIG_CMD_CREATE, nullptr, nullptr, 0) != 0) {
        mount_failed(fmt::format("creating the {} of {}", type, describe));
    }
    UniqueFd mount{::fsmount(context.get(), FSMOUNT_CLOEXEC, attributes)};
    if (!mount) {
        mount_failed(fmt::format("mounting the {} of {}", type, describe));
    }
    return mount;
}

std::vector<std::pair<std::string, std::string>> tmpfs_options(std::uint64_t bytes,
                                                               const char* mode) {
    return {{"size", std::to_string(bytes)},
            {"nr_inodes", std::to_string(inodes_for(bytes))},
            {"mode", mode}};
}

void set_attributes(int mount, std::uint64_t attributes, std::string_view describe) {
    struct mount_attr attr {};
    attr.attr_set = attributes;
    if (::mount_setattr(mount, "", AT_EMPTY_PATH, &attr, sizeof attr) != 0) {
        mount_failed(fmt::format("making {} read-only", describe));
    }
}

void attach(int mount, int target, std::string_view describe) {
    if (::move_mount(mount, "", target, "", MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH) !=
        0) {
        mount_failed(fmt::format("mounting {} in the sandbox's root", describe));
    }
}

UniqueFd duplicate(int fd) {
    UniqueFd copy{::fcntl(fd, F_DUPFD_CLOEXEC, 0)};
    if (!copy) {
        throw SystemError(errno, "duplicating a descriptor of the sandbox's root");
    }
    return copy;
}

std::string fd_path(int fd) {
    return fmt::format("/proc/self/fd/{}", fd);
}

// A read-only view of the host directory `source` (a trusted host path the image plan names, e.g.
// /usr for the host image). The host's layout stays private: a bind would show the host's disk in
// the guest's mountinfo (`ext4 /dev/vda rw,discard,...`, and the directory's path on that disk). An
// overlay with no upper layer, its layers named by descriptors, shows only
// `/ ... - overlay overlay ro,lowerdir=/proc/self/fd/N:/proc/self/fd/M` and an anonymous device
// number. overlayfs wants two layers when it has no upper one: the host directory over `empty`,
// an empty directory of ours. Like a non-recursive bind, it shows no mount beneath `source`.
UniqueFd host_directory_view(const fs::path& source, int empty, std::string_view describe) {
    const UniqueFd dir{::open(source.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC)};
    if (!dir) {
        mount_failed(fmt::format("opening the host's {} for {}", source.string(), describe));
    }
    return new_mount("overlay", {{"lowerdir", fd_path(dir.get()) + ":" + fd_path(empty)}},
                     MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV, describe);
}

// A host file the image plan names (e.g. /etc/ld.so.cache) is copied into the root, not bound:
// a bind of a file cannot hide the host disk it lives on (item 8), and an overlay needs a
// directory. These are small, trusted host files; the copy is read at each launch, so it is as
// current as the bind was when the sandbox started.
std::string read_host_file(const fs::path& source) {
    constexpr std::size_t kLimit = 16u << 20;
    const UniqueFd fd{::open(source.c_str(), O_RDONLY | O_CLOEXEC)};
    if (!fd) {
        throw SystemError(errno, fmt::format("reading the host's {}", source.string()));
    }
    std::string content;
    char chunk[16384];
    for (;;) {
        const ssize_t n = ::read(fd.get(), chunk, sizeof chunk);
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n < 0) {
            throw SystemError(errno, fmt::format("reading the host's {}", source.string()));
        }
        if (n == 0) {
            return content;
        }
        content.append(chunk, static_cast<std::size_t>(n));
        if (content.size() > kLimit) {
            throw InvalidArgument(fmt::format(
                "the host's {} is larger than {} MiB; it is copied into every sandbox's root",
                source.string(), kLimit >> 20));
        }
    }
}

bool beneath(std::string_view path, std::string_view dir) {
    return path == dir || (path.starts_with(dir) && path.size() > dir.size() &&
                           (dir == "/" || path[dir.size()] == '/'));
}

// Runs one step of building the root on a path the image controls. The image's content is the
// caller's input: a link (or a non-directory) where the runtime needs a directory or a file is
// refused as InvalidArgument naming the path, never followed.
template <typename Step>
auto on_image_path(std::string_view guest_path, std::string_view what, Step&& step) {
    try {
        return step();
    } catch (const SystemError&) {
        throw;
    } catch (const Error& e) {
        throw InvalidArgument(fmt::format(
            "the image's '{}' cannot hold {} ({}); the runtime never follows a link (or uses a "
            "non-directory) there while it builds a sandbox's root: fix the image",
            guest_path, what, e.what()));
    }
}

// Ensures the guest directory `dir` in `tree` (a root whose paths are guest paths): parents owned
// by the guest's root, the directory itself (when made) by the guest user.
void make_guest_dir(int tree, std::string_view dir, const GuestOwner& root,
                    const GuestOwner& user) {
    const auto parent = fs::path(dir).parent_path().string();
    on_image_path(dir, "a directory", [&] {
        // The work directory's parent (/maf-sandbox) belongs to the guest's root, even where the
        // image ships it owned by an id the sandbox does not map (the host image's skeleton is
        // host root's): the file plane acts as the guest's root and must be able to create
        // beside the work directory. fchown on the descriptor copies it up into the sandbox's
        // own layer; the image's copy is untouched.
        const auto parent_dir =
            GuestFs(duplicate(tree), root).make_directory(parent.empty() ? "/" : parent);
        struct stat info {};
        if (!parent.empty() && parent != "/" && ::fstat(parent_dir.get(), &info) == 0 &&
            (info.st_uid != root.uid || info.st_gid != root.gid) &&
            ::fchown(parent_dir.get(), root.uid, root.gid) != 0) {
            throw SystemError(errno, fmt::format("handing '{}' to the guest's root", parent));
        }
        GuestFs(duplicate(tree), user).mkdirs(dir);
    });
}

// mknod applies the umask, and the device nodes' modes must be exact. The host-side half of the
// supervisor has one thread while it builds the root, so nothing else creates files meanwhile.
class ScopedUmask {
  public:
    explicit ScopedUmask(mode_t mask) : before_(::umask(mask)) {}
    ~ScopedUmask() { ::umask(before_); }
    ScopedUmask(const ScopedUmask&) = delete;
    ScopedUmask& operator=(const ScopedUmask&) = delete;

  private:
    mode_t before_;
};

// Rootless (no CAP_MKNOD over the host, and a tmpfs made in a user namespace never opens nodes):
// the host's own node bound onto an empty file of ours. Its mount shows the host's devtmpfs in
// the guest's mountinfo, the one detail of the host's layout rootless mode gives away.
void bind_host_device(int dev, const char* name) {
    const auto host = fmt::format("/dev/{}", name);
    const UniqueFd file{
        ::openat(dev, name, O_CREAT | O_EXCL | O_WRONLY | O_NOFOLLOW | O_CLOEXEC, 0666)};
    const UniqueFd node{::open_tree(AT_FDCWD, host.c_str(), OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC)};
    if (!file || !node ||
        ::move_mount(node.get(), "", file.get(), "",
                     MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH) != 0) {
        throw SystemError(errno, fmt::format("binding the host's {} into the sandbox", host));
    }
}

// /dev: a small tmpfs with the harmless devices (nodes of our own), /dev/shm, the /proc links and
// the devpts mount point;
// read-only once built, so nothing can add device nodes later.
void build_dev(int dev_point, const RootPlan& plan, const GuestOwner& root) {
    const auto dev = new_mount("tmpfs", {{"size", "64k"}, {"mode", "0755"}},
                               MOUNT_ATTR_NOSUID | MOUNT_ATTR_NOEXEC, "/dev");
    attach(dev.get(), dev_point, "/dev");
    // Our own fresh tmpfs: nothing in it was planted, but the same confined layer builds it.
    const GuestFs tree(duplicate(dev.get()), root);
    // The host's layout stays private: nodes of our own, not binds of the host's: a bind shows the
    // host's devtmpfs and its options (the host's memory size) in the guest's mountinfo, one line
    // per device. The tmpfs was made here by host root without nodev, so the nodes open; the guest
    // cannot add any (no CAP_MKNOD over the host, and the mount is read-only once built).
    {
        const ScopedUmask exact_modes(0);
        for (const auto& device : kDevices) {
            if (::mknodat(dev.get(), device.name, S_IFCHR | 0666,
                          makedev(device.major, device.minor)) == 0) {
                continue;
            }
            if (errno != EPERM) {
                throw SystemError(errno,
                                  fmt::format("creating the sandbox's /dev/{}", device.name));
            }
            bind_host_device(dev.get(), device.name);
        }
    }
    for (const auto& [name, link] : {std::pair{"/fd", "/proc/self/fd"},
                                     {"/stdin", "/proc/self/fd/0"},
                                     {"/stdout", "/proc/self/fd/1"},
                                     {"/stderr", "/proc/self/fd/2"}}) {
        tree.symlink(name, link);
    }
    // Where PID 1 mounts the sandbox's own devpts (mounts_inside.cpp): its terminals are the
    // sandbox's, numbered from 0, never the host's.
    [[maybe_unused]] const auto pts = tree.mount_point("/pts", true);
    tree.symlink("/ptmx", "pts/ptmx");
    const auto shm_point = tree.mount_point("/shm", true);
    attach(new_mount("tmpfs", tmpfs_options(plan.shm_bytes, "1777"),
                     MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV, "/dev/shm")
               .get(),
           shm_point.get(), "/dev/shm");
    set_attributes(dev.get(), MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NOEXEC, "/dev");
}

}  // namespace

fs::path prepare_root(const RootPlan& plan, const fs::path& sandbox_dir) {
    if (::unshare(CLONE_NEWNS) != 0) {
        throw SystemError(errno, "creating a private mount namespace for the sandbox's root",
                          "run as root");
    }
    if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) {
        mount_failed("making the sandbox's mount namespace private");
    }
    const GuestOwner root_owner{plan.root_uid, plan.root_gid};
    const GuestOwner guest_owner{plan.guest_uid, plan.guest_gid};

    // (perf, cold acquire) The writable layer's tmpfs goes on the mount point every sandbox of the
    // state directory shares, each in its own private mount namespace: no directory to make (and
    // later remove) per sandbox on the host's file system. On the ext4 here (mounted with
    // `discard`) that mkdir waited for the journal whenever a disposal had just removed files.
    const fs::path layer =
        plan.layer_mount_point.empty() ? sandbox_dir / "layer" : plan.layer_mount_point;
    ::mkdir(layer.c_str(), 0700);
    const auto layer_mount = new_mount("tmpfs", tmpfs_options(plan.disk_bytes, "0755"),
                                       MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV, "the writable layer");
    if (::move_mount(layer_mount.get(), "", AT_FDCWD, layer.c_str(), MOVE_MOUNT_F_EMPTY_PATH) !=
        0) {
        mount_failed(fmt::format("mounting the writable layer on {}", layer.string()));
    }
    // Our own fresh tmpfs: fixed names, nothing an image controls. `root` becomes the guest's root
    // (the overlay's mount point when the image has layers, else the directory itself); `empty`
    // is the empty bottom layer of every host-directory view (host_directory_view).
    const bool layered = !plan.lower_dirs.empty();
    std::vector<const char*> layer_dirs{"root", "empty"};
    if (layered) {
        layer_dirs.insert(layer_dirs.end(), {"upper", "work"});
    }
    for (const char* dir : layer_dirs) {
        if (::mkdirat(layer_mount.get(), dir, 0755) != 0) {
            throw SystemError(errno, fmt::format("creating the layer's {}", dir));
        }
    }
    const auto open_layer = [&](const char* dir, int flags) {
        UniqueFd fd{::openat(layer_mount.get(), dir, flags | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)};
        if (!fd) {
            throw SystemError(errno, fmt::format("opening the layer's {}", dir));
        }
        return fd;
    };
    const fs::path root = layer / "root";
    UniqueFd root_mount = open_layer("root", O_RDONLY);
    const UniqueFd empty_layer = open_layer("empty", O_PATH);
    if (layered) {
        // The host's layout stays private: overlayfs shows its options in the guest's
        // /proc/self/mountinfo exactly as given, so every layer is named by a descriptor of ours
        // (/proc/self/fd/N, resolved once while the file system is created), never by its host
        // path.
        std::vector<UniqueFd> lower_fds;
        std::string lowers;
        for (const auto& lower : plan.lower_dirs) {
            UniqueFd fd{::open(lower.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC)};
            if (!fd) {
                throw SystemError(errno, fmt::format("opening the image layer {}", lower.string()),
                                  "the image may have been removed; import it again");
            }
            lowers += (lowers.empty() ? "" : ":") + fd_path(fd.get());
            lower_fds.push_back(std::move(fd));
        }
        const auto upper = open_layer("upper", O_PATH);
        const auto work = open_layer("work", O_PATH);
        const auto point = open_layer("root", O_PATH);
        auto overlay = new_mount("overlay",
                                 {{"lowerdir", lowers},
                                  {"upperdir", fd_path(upper.get())},
                                  {"workdir", fd_path(work.get())}},
                                 MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV, "the sandbox's root");
        // (perf) The mount point is in the layer's tmpfs, not in the sandbox directory: one
        // directory fewer to make and remove on the host's file system per sandbox (on the ext4
        // here, mounted with `discard`, each rmdir of a directory waits for the journal).
        attach(overlay.get(), point.get(), "the overlay root");
        root_mount = std::move(overlay);
    }
    {
        UniqueFd top{::openat(root_mount.get(), ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC)};
        if (!top || ::fchown(top.get(), plan.root_uid, plan.root_gid) != 0 ||
            ::fchmod(top.get(), 0755) != 0) {
            throw SystemError(errno, "handing the sandbox's root directory to the guest's root");
        }
    }

    // Every path below is resolved in the root by GuestFs (openat2 RESOLVE_IN_ROOT |
    // RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS, one component at a time when creating). No
    // mount of ours is attached to the root until every image path has been resolved, so no
    // resolution crosses a mount (what RESOLVE_NO_XDEV would refuse): the overlay shows none.
    const GuestFs tree(duplicate(root_mount.get()), root_owner);
    for (const auto& file : plan.files) {
        on_image_path(file.target, "a generated file", [&] {
            GuestWriteOptions options;
            options.mode = file.mode;
            options.replace_link = true;  // renamed over the name, never written through it
            tree.write(file.target, file.content, options);
        });
    }
    std::vector<std::string> mounted{"/dev", "/tmp", "/proc"};
    std::vector<std::pair<const BindMount*, UniqueFd>> binds;
    for (const auto& bind : plan.ro_binds) {
        struct stat info {};
        if (::lstat(bind.source.c_str(), &info) != 0) {
            continue;  // an optional host path (e.g. /lib64 on some hosts) is simply absent
        }
        if (S_ISLNK(info.st_mode)) {
            std::error_code ec;
            const auto link = fs::read_symlink(bind.source, ec);
            if (!ec) {
                on_image_path(bind.target, "a link",
                              [&] { tree.symlink(bind.target, link.string()); });
            }
            continue;
        }
        if (S_ISREG(info.st_mode)) {
            const auto content = read_host_file(bind.source);
            on_image_path(bind.target, "a copy of a host file", [&] {
                GuestWriteOptions options;
                options.mode = info.st_mode & 0777;
                options.replace_link = true;
                tree.write(bind.target, content, options);
            });
            continue;
        }
        if (!S_ISDIR(info.st_mode)) {
            throw InvalidArgument(fmt::format(
                "the host's {} is neither a directory nor a regular file; a sandbox can only be "
                "given those",
                bind.source.string()));
        }
        auto point = on_image_path(bind.target, "a mount point",
                                   [&] { return tree.mount_point(bind.target, true); });
        binds.emplace_back(&bind, std::move(point));
        mounted.push_back(bind.target);
    }
    const auto dev_point =
        on_image_path("/dev", "a directory", [&] { return tree.mount_point("/dev", true); });
    const auto tmp_point =
        on_image_path("/tmp", "a directory", [&] { return tree.mount_point("/tmp", true); });
    on_image_path("/proc", "a directory", [&] { tree.mkdirs("/proc"); });
    std::vector<std::string> tmp_dirs;
    for (const auto& given : plan.guest_dirs) {
        auto dir = fs::path(given).lexically_normal().string();
        if (dir.size() > 1 && dir.back() == '/') {
            dir.pop_back();
        }
        if (dir.empty() || dir.front() != '/' || dir.find("/..") != std::string::npos) {
            throw InvalidArgument(
                fmt::format("the guest directory '{}' is not a plain absolute path; name one like "
                            "/maf-sandbox/work",
                            given));
        }
        if (beneath(dir, "/tmp")) {
            tmp_dirs.push_back(dir.substr(4).empty() ? "/" : dir.substr(4));
            continue;
        }
        for (const auto& covered : mounted) {
            if (beneath(dir, covered)) {
                throw InvalidArgument(
                    fmt::format("the directory '{}' lies in '{}', which the sandbox mounts over; "
                                "choose a work directory elsewhere (e.g. /maf-sandbox/work)",
                                dir, covered));
            }
        }
        make_guest_dir(root_mount.get(), dir, root_owner, guest_owner);
    }
    on_image_path(std::string("/") + kOldRootDir, "a directory", [&] {
        const auto old_root = tree.make_directory(std::string("/") + kOldRootDir);
        if (::fchmod(old_root.get(), 0700) != 0) {
            throw SystemError(errno, "protecting the sandbox's old-root directory");
        }
    });

    // Then our own mounts, each onto the descriptor of its mount point.
    for (const auto& [bind, point] : binds) {
        attach(host_directory_view(bind->source, empty_layer.get(), bind->target).get(),
               point.get(), bind->target);
    }
    build_dev(dev_point.get(), plan, root_owner);
    const auto tmp = new_mount("tmpfs", tmpfs_options(plan.tmp_bytes, "1777"),
                               MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV, "/tmp");
    for (const auto& dir : tmp_dirs) {
        if (dir != "/") {
            make_guest_dir(tmp.get(), dir, root_owner, guest_owner);
        }
    }
    attach(tmp.get(), tmp_point.get(), "/tmp");
    return root;
}

}  // namespace maf_sandbox::runtime
