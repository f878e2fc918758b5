// The egress proxy's allow-list. Found by running the egress batteries (tests/egress,
// tests/egress_proxy) with the filter logging instead of refusing: every call listed here is one
// the proxy or glibc under it made (getaddrinfo's netlink probe and UDP/TCP to the name server
// included). tests/egress_proxy/egress_proxy_filter_test.cpp proves what it allows and refuses,
// and tests/egress/service_identity_test.cpp that the running proxy has it on.
#include "egress_proxy_filter.hpp"

#include <linux/netlink.h>
#include <sched.h>
#include <seccomp.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fmt/format.h>

#include "maf_sandbox/core/errors.hpp"

namespace maf_sandbox::runtime {

namespace {

// Allowed with any arguments. Names this kernel's libseccomp does not know are skipped.
constexpr const char* kAllowed[] = {
    // memory and threads (asio's resolver runs getaddrinfo on a thread of its own)
    "brk",
    "mmap",
    "munmap",
    "mprotect",
    "mremap",
    "madvise",
    "futex",
    "set_robust_list",
    "get_robust_list",
    "rseq",
    "set_tid_address",
    "exit",
    "exit_group",
    "gettid",
    "getpid",
    "sched_yield",
    "sched_getaffinity",
    "membarrier",
    "prlimit64",
    "getrlimit",
    // signals (handlers, masks; sending is restricted below)
    "rt_sigaction",
    "rt_sigprocmask",
    "rt_sigreturn",
    "sigaltstack",
    "restart_syscall",
    // time
    "clock_gettime",
    "clock_getres",
    "clock_nanosleep",
    "nanosleep",
    "gettimeofday",
    "time",
    // descriptors and files: the resolver reads /etc; the log is appended to
    "read",
    "write",
    "readv",
    "writev",
    "pread64",
    "pwrite64",
    "lseek",
    "close",
    "close_range",
    "openat",
    "open",
    "fstat",
    "newfstatat",
    "stat",
    "lstat",
    "statx",
    "fcntl",
    "dup",
    "dup2",
    "dup3",
    "pipe",
    "pipe2",
    "splice",
    "access",
    "faccessat",
    "faccessat2",
    "readlink",
    "readlinkat",
    "getrandom",
    "uname",
    "getuid",
    "geteuid",
    "getgid",
    "getegid",
    "getcwd",
    // the event loop
    "poll",
    "ppoll",
    "select",
    "pselect6",
    "epoll_create",
    "epoll_create1",
    "epoll_ctl",
    "epoll_wait",
    "epoll_pwait",
    "epoll_pwait2",
    "eventfd",
    "eventfd2",
    "timerfd_create",
    "timerfd_settime",
    "timerfd_gettime",
    // sockets once made
    "connect",
    "accept",
    "accept4",
    "bind",
    "getsockname",
    "getpeername",
    "setsockopt",
    "getsockopt",
    "sendto",
    "recvfrom",
    "sendmsg",
    "recvmsg",
    "sendmmsg",
    "recvmmsg",
    "shutdown",
};

// Socket families the proxy creates: TCP/UDP over IPv4 and IPv6, and AF_UNIX (glibc's nscd
// probe). AF_NETLINK is allowed for NETLINK_ROUTE only, which getaddrinfo reads for
// AI_ADDRCONFIG.
constexpr int kSocketFamilies[] = {AF_INET, AF_INET6, AF_UNIX};

// ioctls the proxy makes: non-blocking mode and bytes readable (asio).
constexpr unsigned long kIoctls[] = {FIONBIO, FIONREAD, FIOCLEX, FIONCLEX};

void check(int rc, const char* doing) {
    if (rc < 0) {
        throw SystemError(-rc, fmt::format("building the egress proxy's seccomp filter: {}", doing),
                          "install libseccomp 2.5 or newer");
    }
}

}  // namespace

void install_egress_proxy_filter() {
    scmp_filter_ctx ctx = ::seccomp_init(SCMP_ACT_ERRNO(EPERM));
    if (ctx == nullptr) {
        throw SystemError(ENOMEM, "creating the egress proxy's seccomp filter");
    }
    struct Release {
        scmp_filter_ctx ctx;
        ~Release() { ::seccomp_release(ctx); }
    } release{ctx};
    check(::seccomp_attr_set(ctx, SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_KILL_PROCESS),
          "killing on foreign ABIs");
    for (const char* name : kAllowed) {
        const int nr = ::seccomp_syscall_resolve_name(name);
        if (nr != __NR_SCMP_ERROR) {
            check(::seccomp_rule_add(ctx, SCMP_ACT_ALLOW, nr, 0), name);
        }
    }
    // The kernel reads these arguments as ints: compare the low 32 bits only.
    constexpr scmp_datum_t kLow32 = 0xFFFFFFFFul;
    for (const int family : kSocketFamilies) {
        check(::seccomp_rule_add(
                  ctx, SCMP_ACT_ALLOW, SCMP_SYS(socket), 1,
                  SCMP_A0(SCMP_CMP_MASKED_EQ, kLow32, static_cast<scmp_datum_t>(family))),
              "socket families");
    }
    check(::seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(socket), 2,
                             SCMP_A0(SCMP_CMP_MASKED_EQ, kLow32, AF_NETLINK),
                             SCMP_A2(SCMP_CMP_MASKED_EQ, kLow32, NETLINK_ROUTE)),
          "netlink route sockets");
    check(::seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(socketpair), 1,
                             SCMP_A0(SCMP_CMP_MASKED_EQ, kLow32, AF_UNIX)),
          "unix socket pairs");
    for (const unsigned long request : kIoctls) {
        check(::seccomp_rule_add(
                  ctx, SCMP_ACT_ALLOW, SCMP_SYS(ioctl), 1,
                  SCMP_A1(SCMP_CMP_MASKED_EQ, kLow32, static_cast<scmp_datum_t>(request))),
              "ioctl");
    }
    // Threads only: clone with CLONE_THREAD (a new process or new namespaces are refused), and
    // clone3, whose flags a filter cannot read, ENOSYS so that glibc falls back to clone.
    constexpr scmp_datum_t kNewNamespaces = CLONE_NEWNS | CLONE_NEWUSER | CLONE_NEWPID |
                                            CLONE_NEWNET | CLONE_NEWUTS | CLONE_NEWIPC |
                                            CLONE_NEWCGROUP | CLONE_NEWTIME;
    check(::seccomp_rule_add(
              ctx, SCMP_ACT_ALLOW, SCMP_SYS(clone), 1,
              SCMP_A0(SCMP_CMP_MASKED_EQ, CLONE_THREAD | kNewNamespaces, CLONE_THREAD)),
          "clone of threads");
    check(::seccomp_rule_add(ctx, SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(clone3), 0), "clone3");
    // Signals to itself only (abort, a thread's own), never to another process.
    const auto self = static_cast<scmp_datum_t>(::getpid());
    check(::seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(kill), 1,
                             SCMP_A0(SCMP_CMP_MASKED_EQ, kLow32, self)),
          "kill of itself");
    check(::seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(tgkill), 1,
                             SCMP_A0(SCMP_CMP_MASKED_EQ, kLow32, self)),
          "tgkill of its own threads");
    // prctl: only PR_SET_NAME (threads named by glibc or asio) and reading no_new_privs.
    for (const int option : {PR_SET_NAME, PR_GET_NAME}) {
        check(::seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(prctl), 1,
                                 SCMP_A0(SCMP_CMP_EQ, static_cast<scmp_datum_t>(option))),
              "prctl names");
    }
    check(::seccomp_load(ctx), "loading it");
}

}  // namespace maf_sandbox::runtime
