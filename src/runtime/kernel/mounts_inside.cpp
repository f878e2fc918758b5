// The inside half of the sandbox's root file system: PID 1, within the new namespaces, pivots
// into the root the host half built (mounts_host.cpp), mounts its own /proc with the host's
// kernel files masked and its own devpts, and detaches the host's root.
#include <sys/mount.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <string>

#include <fmt/format.h>

#include "maf_sandbox/core/errors.hpp"
#include "maf_sandbox/runtime/kernel/mounts.hpp"

namespace maf_sandbox::runtime {

namespace {

// Host kernel files a guest reads as empty, as container runtimes mask /proc entries: the
// kernel's command line names the host's root device and boot setup; partitions and diskstats
// name the host's disks. Each is covered by a bind of the guest's own /dev/null (a node in the
// sandbox's /dev tmpfs, so the mount line names nothing of the host).
// The kernel's boot_id is the host's identity (the same in every sandbox on it, changing only
// at its reboot): it would let a guest tell which sandboxes share a host.
constexpr const char* kMaskedProcFiles[] = {"/proc/cmdline", "/proc/partitions", "/proc/diskstats",
                                            "/proc/sys/kernel/random/boot_id"};

// Host kernel directories a guest finds empty: /proc/fs holds one directory per mounted block
// device of ext4, jbd2 and xfs (named after the host's disk, with its mount options and its
// free-block layout in mb_groups) and nfsd's exports. Each is covered by an empty read-only tmpfs
// whose mount line names nothing of the host. /proc/devices stays: it lists driver names and
// majors the kernel was built with, not this host's disks.
constexpr const char* kMaskedProcDirs[] = {"/proc/fs"};

}  // namespace

void enter_root() {
    if (::syscall(SYS_pivot_root, ".", kOldRootDir) != 0) {
        throw SystemError(errno, "pivot_root into the sandbox's root");
    }
    if (::chdir("/") != 0) {
        throw SystemError(errno, "entering the sandbox's root");
    }
    // A fresh /proc must be mounted while the host's /proc is still visible: the kernel only lets
    // a user namespace mount proc when an unobscured one is already in its mount namespace.
    if (::mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, nullptr) != 0) {
        throw SystemError(
            errno, "mounting /proc in the sandbox",
            "run as root on a kernel with overlayfs, tmpfs and the new mount API (5.2+)");
    }
    // Still as the namespace's root, which may mount over its own /proc; the guest, refused
    // mount and umount by seccomp and holding no capability, cannot take these off.
    for (const char* file : kMaskedProcFiles) {
        if (::mount("/dev/null", file, nullptr, MS_BIND, nullptr) != 0) {
            throw SystemError(errno, fmt::format("masking {} in the sandbox", file));
        }
    }
    for (const char* dir : kMaskedProcDirs) {
        if (::mount("tmpfs", dir, "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC,
                    "size=4k,nr_inodes=1,mode=0555") != 0) {
            throw SystemError(errno, fmt::format("masking {} in the sandbox", dir));
        }
    }
    // A devpts instance of the sandbox's own (a mount in its user namespace is always a new
    // instance): the terminals of `exec -t` are allocated here, invisible to the host's and to
    // other sandboxes'. ptmxmode lets the guest user open /dev/ptmx; mode keeps a terminal
    // writable by its owner only. max: the terminals of every instance but the host's own count
    // against one host-wide kernel.pty.max (less its kernel.pty.reserve for the host), so each
    // sandbox may hold a few dozen, never the lot.
    if (::mount("devpts", "/dev/pts", "devpts", MS_NOSUID | MS_NOEXEC,
                "newinstance,ptmxmode=0666,mode=0620,max=64") != 0) {
        throw SystemError(errno, "mounting the sandbox's devpts on /dev/pts");
    }
    const std::string old_root = std::string("/") + kOldRootDir;
    if (::umount2(old_root.c_str(), MNT_DETACH) != 0) {
        throw SystemError(errno, "detaching the host's root from the sandbox");
    }
    ::rmdir(old_root.c_str());
}

}  // namespace maf_sandbox::runtime
