// The sandbox's root filesystem. Built by the host-side half of the supervisor (real root, in a
// private mount namespace, so nothing appears on the host), then entered by the sandbox's PID 1
// with pivot_root. The writable layer is a tmpfs whose size is the disk limit: a write beyond it
// fails with ENOSPC inside the guest, and the memory vanishes with the last namespace reference.
#include <fcntl.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include <fmt/format.h>

#include "maf_sandbox/core/errors.hpp"
#include "maf_sandbox/runtime/images.hpp"
#include "maf_sandbox/runtime/isolation.hpp"
#include "maf_sandbox/runtime/unique_fd.hpp"

namespace maf_sandbox::runtime {

namespace fs = std::filesystem;

namespace {

constexpr const char* kDevices[] = {"null", "zero", "full", "random", "urandom", "tty"};

void do_mount(const char* source, const fs::path& target, const char* type, unsigned long flags,
              const std::string& data = {}) {
    if (::mount(source, target.c_str(), type, flags, data.empty() ? nullptr : data.c_str()) != 0) {
        throw SystemError(errno,
                          fmt::format("mount {} `{}` on {}", type ? type : "bind",
                                      source ? source : "", target.string()),
                          "run as root on a kernel with overlayfs and tmpfs");
    }
}

// A tmpfs's inode count is not bounded by its size (an empty file takes no page), and every inode
// is kernel memory charged to the sandbox: without a count, creating empty files until the memory
// limit starves the sandbox's own supervisor. One inode per 8 KiB of size (at least 4096) leaves
// room for a 100,000-file tree in the default 2 GiB layer.
std::uint64_t inodes_for(std::uint64_t bytes) {
    return std::max<std::uint64_t>(bytes / 8192, 4096);
}

std::string tmpfs_options(std::uint64_t bytes, const char* mode) {
    return fmt::format("size={},nr_inodes={},mode={}", bytes, inodes_for(bytes), mode);
}

fs::path under(const fs::path& root, std::string_view guest_path) {
    return root / fs::path(guest_path).relative_path();
}

// mkdir -p below `root`, new directories owned by (uid, gid).
void make_dirs(const fs::path& root, const fs::path& path, uid_t uid, gid_t gid,
               mode_t mode = 0755) {
    fs::path current = root;
    for (const auto& part : path.lexically_relative(root)) {
        current /= part;
        if (::mkdir(current.c_str(), mode) == 0) {
            if (::chown(current.c_str(), uid, gid) != 0) {
                throw SystemError(errno, fmt::format("chown {}", current.string()));
            }
        } else if (errno != EEXIST) {
            throw SystemError(errno,
                              fmt::format("creating {} in the sandbox root", current.string()));
        }
    }
}

void make_file(const fs::path& path, mode_t mode) {
    UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW, mode));
    if (!fd) {
        throw SystemError(errno, fmt::format("creating mount point {}", path.string()));
    }
}

void bind_read_only(const fs::path& source, const fs::path& target) {
    do_mount(source.c_str(), target, nullptr, MS_BIND);
    do_mount(nullptr, target, nullptr, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV);
}

void add_bind(const fs::path& root, const BindMount& bind, uid_t uid, gid_t gid) {
    struct stat info {};
    if (::lstat(bind.source.c_str(), &info) != 0) {
        return;  // an optional host path (e.g. /lib64 on some hosts) is simply absent
    }
    const fs::path target = under(root, bind.target);
    make_dirs(root, target.parent_path(), uid, gid);
    if (S_ISLNK(info.st_mode)) {
        std::error_code ec;
        const auto link = fs::read_symlink(bind.source, ec);
        if (!ec && ::symlink(link.c_str(), target.c_str()) != 0 && errno != EEXIST) {
            throw SystemError(errno, fmt::format("recreating the link {}", bind.target));
        }
        return;
    }
    if (S_ISDIR(info.st_mode)) {
        make_dirs(root, target, uid, gid);
    } else {
        make_file(target, 0644);
    }
    bind_read_only(bind.source, target);
}

void write_generated(const fs::path& root, const GeneratedFile& file, uid_t uid, gid_t gid) {
    const fs::path target = under(root, file.target);
    make_dirs(root, target.parent_path(), uid, gid);
    UniqueFd fd(
        ::open(target.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, file.mode));
    if (!fd || ::write(fd.get(), file.content.data(), file.content.size()) !=
                   static_cast<ssize_t>(file.content.size())) {
        throw SystemError(errno, fmt::format("writing {} in the sandbox root", file.target));
    }
    if (::fchown(fd.get(), uid, gid) != 0 || ::fchmod(fd.get(), file.mode) != 0) {
        throw SystemError(errno, fmt::format("setting the owner of {}", file.target));
    }
}

void build_dev(const fs::path& root, const RootPlan& plan) {
    const fs::path dev = root / "dev";
    make_dirs(root, dev, plan.root_uid, plan.root_gid);
    do_mount("tmpfs", dev, "tmpfs", MS_NOSUID | MS_NOEXEC, "size=64k,mode=0755");
    for (const char* name : kDevices) {
        const fs::path target = dev / name;
        make_file(target, 0666);
        do_mount((fs::path("/dev") / name).c_str(), target, nullptr, MS_BIND);
    }
    for (const auto& [name, link] : {std::pair{"fd", "/proc/self/fd"},
                                     {"stdin", "/proc/self/fd/0"},
                                     {"stdout", "/proc/self/fd/1"},
                                     {"stderr", "/proc/self/fd/2"}}) {
        if (::symlink(link, (dev / name).c_str()) != 0) {
            throw SystemError(errno, fmt::format("creating /dev/{} in the sandbox", name));
        }
    }
    const fs::path shm = dev / "shm";
    make_dirs(root, shm, plan.root_uid, plan.root_gid);
    do_mount("tmpfs", shm, "tmpfs", MS_NOSUID | MS_NODEV, tmpfs_options(plan.shm_bytes, "1777"));
    // Nothing may add device nodes later.
    do_mount(nullptr, dev, nullptr, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NOEXEC,
             "size=64k,mode=0755");
}

}  // namespace

fs::path prepare_root(const RootPlan& plan, const fs::path& sandbox_dir) {
    if (::unshare(CLONE_NEWNS) != 0) {
        throw SystemError(errno, "creating a private mount namespace for the sandbox's root",
                          "run as root");
    }
    do_mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE);

    // (perf, cold acquire) The writable layer's tmpfs goes on the mount point every sandbox of the
    // state directory shares, each in its own private mount namespace: no directory to make (and
    // later remove) per sandbox on the host's file system. On the ext4 here (mounted with
    // `discard`) that mkdir waited for the journal, 2-4 ms, whenever a disposal had just removed
    // files.
    const fs::path layer =
        plan.layer_mount_point.empty() ? sandbox_dir / "layer" : plan.layer_mount_point;
    ::mkdir(layer.c_str(), 0700);
    do_mount("tmpfs", layer, "tmpfs", MS_NOSUID | MS_NODEV, tmpfs_options(plan.disk_bytes, "0755"));
    fs::path root = layer;
    if (!plan.lower_dirs.empty()) {
        const fs::path upper = layer / "upper";
        const fs::path work = layer / "work";
        ::mkdir(upper.c_str(), 0755);
        ::mkdir(work.c_str(), 0700);
        std::string lowers;
        for (const auto& lower : plan.lower_dirs) {
            lowers += (lowers.empty() ? "" : ":") + lower.string();
        }
        // (perf) The mount point is in the layer's tmpfs, not in the sandbox directory: one
        // directory fewer to make and remove on the host's file system per sandbox (on the ext4
        // here, mounted with `discard`, each rmdir of a directory waits about 4 ms).
        root = layer / "root";
        ::mkdir(root.c_str(), 0755);
        do_mount("overlay", root, "overlay", MS_NOSUID | MS_NODEV,
                 fmt::format("lowerdir={},upperdir={},workdir={}", lowers, upper.string(),
                             work.string()));
    }
    if (::chown(root.c_str(), plan.root_uid, plan.root_gid) != 0 ||
        ::chmod(root.c_str(), 0755) != 0) {
        throw SystemError(errno, "handing the sandbox's root directory to the guest's root");
    }
    for (const auto& file : plan.files) {
        write_generated(root, file, plan.root_uid, plan.root_gid);
    }
    for (const auto& bind : plan.ro_binds) {
        add_bind(root, bind, plan.root_uid, plan.root_gid);
    }
    build_dev(root, plan);
    const fs::path tmp = root / "tmp";
    make_dirs(root, tmp, plan.root_uid, plan.root_gid);
    do_mount("tmpfs", tmp, "tmpfs", MS_NOSUID | MS_NODEV, tmpfs_options(plan.tmp_bytes, "1777"));
    make_dirs(root, root / "proc", plan.root_uid, plan.root_gid);
    for (const auto& dir : plan.guest_dirs) {
        const fs::path path = under(root, dir);
        make_dirs(root, path.parent_path(), plan.root_uid, plan.root_gid);
        make_dirs(root, path, plan.guest_uid, plan.guest_gid);
    }
    make_dirs(root, root / kOldRootDir, plan.root_uid, plan.root_gid, 0700);
    return root;
}

RootPlan root_plan_for(const MountPlan& image, std::vector<std::string> guest_dirs) {
    RootPlan plan;
    if (!image.lower_dir.empty()) {
        plan.lower_dirs.push_back(image.lower_dir);
    }
    for (const auto& bind : image.ro_binds) {
        plan.ro_binds.push_back({bind.host_path, bind.guest_path});
    }
    plan.guest_dirs = std::move(guest_dirs);
    return plan;
}

void enter_root() {
    if (::syscall(SYS_pivot_root, ".", kOldRootDir) != 0) {
        throw SystemError(errno, "pivot_root into the sandbox's root");
    }
    if (::chdir("/") != 0) {
        throw SystemError(errno, "entering the sandbox's root");
    }
    // A fresh /proc must be mounted while the host's /proc is still visible: the kernel only lets
    // a user namespace mount proc when an unobscured one is already in its mount namespace.
    do_mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC);
    const std::string old_root = std::string("/") + kOldRootDir;
    if (::umount2(old_root.c_str(), MNT_DETACH) != 0) {
        throw SystemError(errno, "detaching the host's root from the sandbox");
    }
    ::rmdir(old_root.c_str());
}

}  // namespace maf_sandbox::runtime
