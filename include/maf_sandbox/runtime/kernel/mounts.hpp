// The sandbox's root file system. Split as the work is: the host half (mounts_host.cpp) builds
// the root as host root in a private mount namespace, before the clone; the inside half
// (mounts_inside.cpp) is PID 1 entering it, within the new namespaces.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace maf_sandbox::runtime {

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

// --- host half (mounts_host.cpp): the supervisor's host-side half, before the clone -------------

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

// --- inside half (mounts_inside.cpp): PID 1, within the new namespaces --------------------------

// Inside the new namespaces, with the current directory at the prepared root: pivot_root into
// it, mount a fresh /proc, detach the host's root. Throws SystemError.
void enter_root();

}  // namespace maf_sandbox::runtime
