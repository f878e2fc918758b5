// Dropping every capability before guest code runs. Raw syscalls (not libcap) because this runs
// between fork and exec, where only async-signal-safe calls belong.
#include <linux/capability.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>

#include "maf_sandbox/runtime/kernel/capabilities.hpp"

namespace maf_sandbox::runtime {

namespace {
constexpr int kHighestCapability = 63;  // beyond CAP_LAST_CAP of any kernel so far
}

bool drop_bounding_set() noexcept {
    for (int cap = 0; cap <= kHighestCapability; ++cap) {
        if (::prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0) {
            // Capabilities are numbered without gaps: EINVAL means past the kernel's last one.
            return errno == EINVAL && cap > 0;
        }
    }
    return true;
}

bool drop_all_capabilities() noexcept {
    if (::prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) != 0 && errno != EINVAL) {
        return false;
    }
    __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
    __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3] = {};
    if (::syscall(SYS_capset, &header, data) != 0) {
        return false;
    }
    return ::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0;
}

}  // namespace maf_sandbox::runtime
