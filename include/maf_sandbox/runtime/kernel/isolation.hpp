// The kernel pieces a sandbox is built from, one concern per source file: namespaces.cpp,
// mounts.cpp, seccomp.cpp and capabilities.cpp. Only the supervisor calls these; functions marked
// async-signal-safe may run between fork and exec.
#pragma once

#include <linux/filter.h>
#include <sys/types.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace maf_sandbox::runtime {

// --- namespaces.cpp -----------------------------------------------------------------------------

// How many host ids past a sandbox's guest ids belong to its own unprivileged services.
inline constexpr std::uint32_t kServiceIdCount = 2;

// A sandbox's host ids. Guest ids [0, count) map to host ids [host_base, host_base + count); the
// next kServiceIdCount host ids belong to the sandbox's services (its egress proxy and its
// slirp4netns), which no guest id maps to, so no guest process can ever hold them.
struct IdMapping {
    uid_t host_base = 100000;
    std::uint32_t count = 65536;
    uid_t to_host(uid_t guest) const noexcept { return host_base + guest; }
    // The host uid (and gid) the egress proxy runs as.
    uid_t proxy_id() const noexcept { return host_base + count; }
    // The host uid (and gid) slirp4netns runs as.
    uid_t slirp_id() const noexcept { return host_base + count + 1; }
    // Every host id the sandbox owns, guest and service ids together.
    std::uint32_t span() const noexcept { return count + kServiceIdCount; }
};

// The one mapping every sandbox shared before each got a slot of the host id pool (id_ranges.hpp):
// what a handle recorded by an older runtime had. launch_sandbox never hands it out.
inline constexpr IdMapping kDefaultIdMapping{};

// Every namespace a sandbox gets: user, mount, PID, IPC, UTS, network and cgroup.
unsigned long sandbox_namespace_flags() noexcept;

// fork() with namespace flags (raw clone, no new stack: the child continues like a fork child).
// Throws SystemError.
pid_t clone_with_namespaces(unsigned long flags);

// As clone_with_namespaces, with CLONE_NEWUSER in `flags`, from a caller running as host root: the
// new user namespace is owned by host uid `owner` and gid `owner_group` (the kernel takes the
// creator's effective ids), so every per-user count the sandbox makes (inotify, fanotify, queued
// signals, message queues, namespaces) is charged to that uid and bounded by its limits, never
// host root's. Only the effective ids change, for the clone alone: the caller is root again on
// return, and the child starts with host root's file-system ids, so it still reaches the prepared
// root through the state directory. Throws SystemError.
pid_t clone_with_owned_namespaces(unsigned long flags, uid_t owner, gid_t owner_group);

// Writes uid_map and gid_map of `pid` (a child in a new user namespace). Throws SystemError.
void write_id_maps(pid_t pid, const IdMapping& mapping);

// Inside the new namespaces: sets the UTS hostname and brings the loopback interface up (the
// network namespace then has loopback only: no route, no DNS). Throw SystemError.
void set_hostname(std::string_view hostname);
void bring_up_loopback();

// --- mounts.cpp ---------------------------------------------------------------------------------

struct BindMount {
    std::filesystem::path source;  // host: a dir shown by an overlay, file copied, link recreated
    std::string target;            // absolute guest path
};

struct GeneratedFile {
    std::string target;  // absolute guest path
    std::string content;
    mode_t mode = 0644;
};

// How a sandbox's root filesystem is assembled, all ids as seen on the host.
struct RootPlan {
    std::vector<std::filesystem::path> lower_dirs;  // overlay lowers, topmost first; empty: none
    std::vector<BindMount> ro_binds;                // host paths shown read-only (mounts.cpp)
    std::vector<GeneratedFile> files;               // e.g. an /etc/passwd naming the guest user
    std::vector<std::string> guest_dirs;            // created and owned by the guest user
    std::uint64_t disk_bytes = 2ull << 30;          // the writable layer (tmpfs) size
    std::uint64_t tmp_bytes = 512ull << 20;         // /tmp
    std::uint64_t shm_bytes = 64ull << 20;          // /dev/shm
    uid_t root_uid = 0;                             // host uid of the guest's root
    gid_t root_gid = 0;
    uid_t guest_uid = 0;  // host uid of the guest user
    gid_t guest_gid = 0;
    // Where the writable layer's tmpfs is mounted, in the sandbox's own mount namespace: a
    // directory every sandbox of a state directory shares (Registry::layer_mount_point), so none
    // makes a directory of its own for it on the host's file system. Empty: <sandbox_dir>/layer.
    std::filesystem::path layer_mount_point;
};

// The name of the old-root directory pivot_root parks the host root on.
inline constexpr const char* kOldRootDir = ".oldroot";

// Host side, as root: makes this process's mount namespace private, then builds the sandbox's
// root under `sandbox_dir` (a size-limited tmpfs writable layer, an overlay on the image's lower
// dirs when it has any, read-only host paths, a minimal /dev, /tmp, the guest's dirs) and returns
// its path. Every mount lives only in this (and the sandbox's copied) mount namespace, so nothing
// can leak onto the host. The image's tree is touched only through GuestFs from the root's
// descriptor, and every mount is attached onto a mount point's descriptor (never by name), so a
// link the image holds is never followed: a link (or a non-directory) where a directory or file
// is needed throws InvalidArgument naming the image path; a generated file replaces a link at its
// name. A guest dir beneath /dev, /proc or a bind target throws InvalidArgument. Throws
// SystemError naming the mount.
std::filesystem::path prepare_root(const RootPlan& plan, const std::filesystem::path& sandbox_dir);

// Inside the new namespaces, with the current directory at the prepared root: pivot_root into
// it, mount a fresh /proc, detach the host's root. Throws SystemError.
void enter_root();

// --- seccomp.cpp --------------------------------------------------------------------------------

// The guest's syscall filter as a BPF program, compiled once per process. Denied calls fail with
// EPERM (clone3 with ENOSYS so libc falls back to clone, whose namespace flags are filtered).
const std::vector<sock_filter>& guest_seccomp_program();

// The filter stacked on slirp4netns's own before it execs, compiled once per process: the native
// AIO and io_uring calls answer ENOSYS (host-wide budgets no namespace divides), and everything
// else is left to slirp4netns's own filter.
const std::vector<sock_filter>& slirp_seccomp_program();

// Async-signal-safe: sets no_new_privs and installs `program` on the calling thread.
bool install_seccomp(const std::vector<sock_filter>& program) noexcept;

// --- capabilities.cpp ---------------------------------------------------------------------------

// Async-signal-safe. Empties the bounding set (needs CAP_SETPCAP: call before changing uid).
bool drop_bounding_set() noexcept;
// Async-signal-safe. Clears ambient, effective, permitted and inheritable sets and sets
// no_new_privs, so nothing the guest executes can regain a capability.
bool drop_all_capabilities() noexcept;

}  // namespace maf_sandbox::runtime
