// The guest's syscall filter. Denied calls fail with EPERM, never kill, so programs can report
// what they were refused. The BPF is compiled once per process and installed per exec with a
// plain prctl, which is safe between fork and exec.
#include <linux/seccomp.h>
#include <sched.h>
#include <seccomp.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/shm.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <termios.h>
#include <unistd.h>

#include <cerrno>
#include <mutex>

#include <fmt/format.h>

#include "maf_sandbox/core/errors.hpp"
#include "maf_sandbox/runtime/kernel/seccomp.hpp"
#include "maf_sandbox/runtime/kernel/unique_fd.hpp"

namespace maf_sandbox::runtime {

namespace {

// Calls that reach the kernel's most dangerous or host-revealing surfaces: mounts and namespaces,
// tracing other processes, keyrings, kernel modules and kexec, BPF and perf, userfaultfd,
// file handles, io_uring (which creates sockets without socket()), swap, accounting, reboot.
// tests/security/escape_syscalls_test.cpp attempts each of them.
constexpr const char* kDenied[] = {
    "mount",
    "umount",
    "umount2",
    "pivot_root",
    "chroot",
    "unshare",
    "setns",
    "fsopen",
    "fsconfig",
    "fsmount",
    "fspick",
    "move_mount",
    "open_tree",
    "mount_setattr",
    "ptrace",
    "process_vm_readv",
    "process_vm_writev",
    "kcmp",
    "bpf",
    "perf_event_open",
    "keyctl",
    "add_key",
    "request_key",
    "kexec_load",
    "kexec_file_load",
    "init_module",
    "finit_module",
    "delete_module",
    "userfaultfd",
    "open_by_handle_at",
    "name_to_handle_at",
    "io_uring_setup",
    "io_uring_enter",
    "io_uring_register",
    "reboot",
    "swapon",
    "swapoff",
    "acct",
    "quotactl",
    "lookup_dcookie",
    "syslog",
    "vhangup",
    "iopl",
    "ioperm",
    "settimeofday",
    "clock_settime",
    "clock_adjtime",
    "adjtimex",
    "nfsservctl",
    "uselib",
};

// Native AIO. Its contexts come from one host-wide pool (fs.aio-max-nr) that no namespace or
// cgroup divides: a guest looping io_setup starved the host and every other sandbox. The rest of
// the family only acts on a context io_setup made. Refused with ENOSYS, not EPERM, as clone3 is:
// "not in this kernel" is what libaio users (databases, fio, qemu) test for before falling back
// to plain reads and writes. glibc's POSIX aio (aio_read...) uses threads and keeps working.
constexpr const char* kNativeAio[] = {"io_setup",  "io_destroy",   "io_submit",
                                      "io_cancel", "io_getevents", "io_pgetevents"};

// Huge pages come from one host-wide pool (vm.nr_hugepages) that the memory cgroup does not
// charge, and hosts rarely mount a hugetlb controller: a guest mapping huge pages in a loop took
// the whole pool from the host and every other sandbox. Refused with EINVAL, which is what the
// kernel answers when no huge pages are configured, so programs take their fallback path.
struct FlagArgument {
    const char* syscall;
    unsigned argument;
    scmp_datum_t flag;
};
constexpr FlagArgument kHugePageRequests[] = {
    {"mmap", 3, MAP_HUGETLB},
    {"shmget", 2, SHM_HUGETLB},
    {"memfd_create", 1, MFD_HUGETLB},
};

// Socket families that network namespaces do not confine. AF_VSOCK reaches the hypervisor side
// of a VM host (CID 2) from any namespace, which would bypass closed egress; Bluetooth and the
// Qualcomm IPC router are global too and have no use in a sandbox.
constexpr int kGlobalSocketFamilies[] = {AF_VSOCK, AF_BLUETOOTH, AF_QIPCRTR};

constexpr unsigned long kNamespaceFlags[] = {CLONE_NEWNS,     CLONE_NEWUSER, CLONE_NEWPID,
                                             CLONE_NEWNET,    CLONE_NEWUTS,  CLONE_NEWIPC,
                                             CLONE_NEWCGROUP, CLONE_NEWTIME};

void check(int rc, const char* doing) {
    if (rc < 0) {
        throw SystemError(-rc, fmt::format("building the seccomp filter: {}", doing),
                          "install libseccomp 2.5 or newer");
    }
}

// The calls that reach the kernel's asynchronous I/O engines, which the filter stacked on
// slirp4netns answers with ENOSYS (slirp_seccomp_program).
constexpr const char* kIoUring[] = {"io_uring_setup", "io_uring_enter", "io_uring_register"};

// The BPF program `ctx` compiles to.
std::vector<sock_filter> export_program(scmp_filter_ctx ctx) {
    UniqueFd memfd(::memfd_create("maf-seccomp", MFD_CLOEXEC));
    if (!memfd) {
        throw SystemError(errno, "creating a buffer for the seccomp filter");
    }
    check(::seccomp_export_bpf(ctx, memfd.get()), "exporting the BPF program");
    struct stat info {};
    ::fstat(memfd.get(), &info);
    std::vector<sock_filter> program(static_cast<std::size_t>(info.st_size) / sizeof(sock_filter));
    if (::pread(memfd.get(), program.data(), program.size() * sizeof(sock_filter), 0) !=
        static_cast<ssize_t>(program.size() * sizeof(sock_filter))) {
        throw SystemError(errno, "reading back the seccomp filter");
    }
    return program;
}

struct Release {
    scmp_filter_ctx ctx;
    ~Release() { ::seccomp_release(ctx); }
};

std::vector<sock_filter> compile() {
    scmp_filter_ctx ctx = ::seccomp_init(SCMP_ACT_ALLOW);
    if (ctx == nullptr) {
        throw SystemError(ENOMEM, "creating the seccomp filter");
    }
    const Release release{ctx};
    const auto deny = SCMP_ACT_ERRNO(EPERM);
    // Foreign-ABI calls (i386 via int 0x80, x32) would slip past a native-only filter.
    check(::seccomp_attr_set(ctx, SCMP_FLTATR_ACT_BADARCH, deny), "refusing foreign ABIs");
    for (const char* name : kDenied) {
        const int nr = ::seccomp_syscall_resolve_name(name);
        if (nr != __NR_SCMP_ERROR) {
            check(::seccomp_rule_add(ctx, deny, nr, 0), name);
        }
    }
    for (const unsigned long flag : kNamespaceFlags) {
        check(::seccomp_rule_add(ctx, deny, SCMP_SYS(clone), 1,
                                 SCMP_A0(SCMP_CMP_MASKED_EQ, flag, flag)),
              "clone with namespace flags");
    }
    // The kernel reads the family as an int: compare the low 32 bits only, or high bits set by
    // the caller would slip past.
    for (const int family : kGlobalSocketFamilies) {
        const auto value = static_cast<scmp_datum_t>(family);
        check(::seccomp_rule_add(ctx, deny, SCMP_SYS(socket), 1,
                                 SCMP_A0(SCMP_CMP_MASKED_EQ, 0xFFFFFFFFul, value)),
              "socket families outside the network namespace");
        check(::seccomp_rule_add(ctx, deny, SCMP_SYS(socketpair), 1,
                                 SCMP_A0(SCMP_CMP_MASKED_EQ, 0xFFFFFFFFul, value)),
              "socket pairs of families outside the network namespace");
    }
    for (const char* name : kNativeAio) {
        const int nr = ::seccomp_syscall_resolve_name(name);
        if (nr != __NR_SCMP_ERROR) {
            check(::seccomp_rule_add(ctx, SCMP_ACT_ERRNO(ENOSYS), nr, 0), name);
        }
    }
    for (const auto& request : kHugePageRequests) {
        const int nr = ::seccomp_syscall_resolve_name(request.syscall);
        if (nr == __NR_SCMP_ERROR) {
            continue;
        }
        const scmp_arg_cmp flag_set{request.argument, SCMP_CMP_MASKED_EQ, request.flag,
                                    request.flag};
        check(::seccomp_rule_add_array(ctx, SCMP_ACT_ERRNO(EINVAL), nr, 1, &flag_set),
              request.syscall);
    }
    // clone3 passes its flags in memory a filter cannot read: ENOSYS makes libc fall back to clone.
    check(::seccomp_rule_add(ctx, SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(clone3), 0), "clone3");
    for (const unsigned long request :
         {static_cast<unsigned long>(TIOCSTI), static_cast<unsigned long>(TIOCLINUX)}) {
        check(::seccomp_rule_add(ctx, deny, SCMP_SYS(ioctl), 1,
                                 SCMP_A1(SCMP_CMP_MASKED_EQ, 0xFFFFFFFFul, request)),
              "ioctl TIOCSTI");
    }
    return export_program(ctx);
}

// slirp4netns's own filter (--enable-seccomp) is a deny-list that lets the native AIO and
// io_uring calls through. slirp4netns, libslirp and glib never make them, so only a slirp4netns
// taken over by the guest's traffic could: the same host-wide budgets the guest is refused
// (fs.aio-max-nr, io_uring's locked memory) would then be one step away. Stacked filters are all
// evaluated and the strictest answer wins, so this one only adds: ENOSYS for those calls, as the
// guest gets, and everything else left to slirp4netns's own list. A foreign ABI would slip past
// native numbers: refused too (slirp4netns makes no such call).
std::vector<sock_filter> compile_slirp() {
    scmp_filter_ctx ctx = ::seccomp_init(SCMP_ACT_ALLOW);
    if (ctx == nullptr) {
        throw SystemError(ENOMEM, "creating slirp4netns's seccomp filter");
    }
    const Release release{ctx};
    check(::seccomp_attr_set(ctx, SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_ERRNO(ENOSYS)),
          "refusing foreign ABIs");
    const auto refuse = [&](const char* name) {
        const int nr = ::seccomp_syscall_resolve_name(name);
        if (nr != __NR_SCMP_ERROR) {
            check(::seccomp_rule_add(ctx, SCMP_ACT_ERRNO(ENOSYS), nr, 0), name);
        }
    };
    for (const char* name : kNativeAio) {
        refuse(name);
    }
    for (const char* name : kIoUring) {
        refuse(name);
    }
    return export_program(ctx);
}

}  // namespace

const std::vector<sock_filter>& slirp_seccomp_program() {
    static const std::vector<sock_filter> program = compile_slirp();
    return program;
}

const std::vector<sock_filter>& guest_seccomp_program() {
    static const std::vector<sock_filter> program = compile();
    return program;
}

bool install_seccomp(const std::vector<sock_filter>& program) noexcept {
    if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) {
        return false;
    }
    sock_fprog fprog{static_cast<unsigned short>(program.size()),
                     const_cast<sock_filter*>(program.data())};
    return ::prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &fprog, 0, 0) == 0;
}

}  // namespace maf_sandbox::runtime
