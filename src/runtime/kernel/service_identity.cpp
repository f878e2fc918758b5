// Dropping a sandbox service (egress proxy, slirp4netns) to its own unprivileged host identity.
// Raw prctl/capset calls as in capabilities.cpp: these run in a freshly forked service process.
#include "service_identity.hpp"

#include <fcntl.h>
#include <grp.h>
#include <linux/capability.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cerrno>
#include <initializer_list>

#include "maf_sandbox/runtime/kernel/capabilities.hpp"

namespace maf_sandbox::runtime {

namespace {

constexpr int kHighestCapability = 63;  // as capabilities.cpp: past any kernel's last one

bool set_capabilities(std::uint64_t permitted, std::uint64_t effective,
                      std::uint64_t inheritable) noexcept {
    __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
    __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3] = {};
    for (int word = 0; word < 2; ++word) {
        data[word].permitted = static_cast<std::uint32_t>(permitted >> (32 * word));
        data[word].effective = static_cast<std::uint32_t>(effective >> (32 * word));
        data[word].inheritable = static_cast<std::uint32_t>(inheritable >> (32 * word));
    }
    return ::syscall(SYS_capset, &header, data) == 0;
}

// Drops every capability but those in `keep` from the bounding set (needs CAP_SETPCAP).
bool limit_bounding_set(std::uint64_t keep) noexcept {
    for (int cap = 0; cap <= kHighestCapability; ++cap) {
        if ((keep >> cap) & 1u) {
            continue;
        }
        if (::prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0) {
            return errno == EINVAL && cap > 0;  // past the kernel's last capability
        }
    }
    return true;
}

bool switch_user(uid_t id) noexcept {
    const gid_t gid = static_cast<gid_t>(id);
    return ::setgroups(0, nullptr) == 0 && ::setresgid(gid, gid, gid) == 0 &&
           ::setresuid(id, id, id) == 0;
}

}  // namespace

bool become_service_user(uid_t id) noexcept {
    if (id == 0 || !drop_bounding_set() || !switch_user(id) || !drop_all_capabilities()) {
        return false;
    }
    return ::prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) == 0;
}

bool become_slirp_user(uid_t id, int userns_fd) noexcept {
    constexpr std::uint64_t kSysAdmin = 1ull << CAP_SYS_ADMIN;
    constexpr std::uint64_t kKept = kSysAdmin | (1ull << CAP_NET_ADMIN);
    // Keep the permitted set across the uid change just long enough to join the user namespace
    // (setns needs CAP_SYS_ADMIN over it, which root of the host's namespace has); the join then
    // replaces every set with the full set of the joined namespace, none over the host's.
    if (id == 0 || ::prctl(PR_SET_KEEPCAPS, 1, 0, 0, 0) != 0 || !switch_user(id) ||
        !set_capabilities(kSysAdmin, kSysAdmin, 0) || ::setns(userns_fd, CLONE_NEWUSER) != 0 ||
        ::prctl(PR_SET_KEEPCAPS, 0, 0, 0, 0) != 0 || !limit_bounding_set(kKept) ||
        ::prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) != 0 ||
        !set_capabilities(kKept, kKept, kKept)) {
        return false;
    }
    for (const int cap : {CAP_SYS_ADMIN, CAP_NET_ADMIN}) {
        if (::prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_RAISE, cap, 0, 0) != 0) {
            return false;
        }
    }
    return ::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0 &&
           ::prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) == 0;
}

bool enter_read_only_mount_namespace(uid_t tun_owner) noexcept {
    if (::unshare(CLONE_NEWNS) != 0 ||
        ::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) {
        return false;
    }
    if (tun_owner != 0) {
        const dev_t kTun = makedev(10, 200);  // the kernel's fixed misc minor for tun
        if (::mount("tmpfs", "/dev/net", "tmpfs", MS_NOSUID | MS_NOEXEC, "size=4k,mode=0755") !=
            0) {
            return false;
        }
        const int dir = ::open("/dev/net", O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (dir < 0) {
            return false;
        }
        bool made = ::mknodat(dir, "tun", S_IFCHR | 0600, kTun) == 0;
        const int node = made ? ::openat(dir, "tun", O_PATH | O_NOFOLLOW | O_CLOEXEC) : -1;
        made = node >= 0 &&
               ::fchownat(node, "", tun_owner, static_cast<gid_t>(tun_owner), AT_EMPTY_PATH) == 0;
        if (node >= 0) {
            ::close(node);
        }
        ::close(dir);
        if (!made) {
            return false;
        }
    }
    mount_attr attributes{};
    attributes.attr_set = MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID;
    attributes.propagation = MS_PRIVATE;  // nothing done here reaches the mounts it copied
    return ::syscall(SYS_mount_setattr, AT_FDCWD, "/", AT_RECURSIVE, &attributes,
                     sizeof attributes) == 0;
}

bool limit_file_size(std::uint64_t bytes) noexcept {
    const rlimit limit{bytes, bytes};
    return ::signal(SIGXFSZ, SIG_IGN) != SIG_ERR && ::setrlimit(RLIMIT_FSIZE, &limit) == 0;
}

}  // namespace maf_sandbox::runtime
