// maf-security-probe: a small static program the security tests copy into a sandbox and run as
// the guest. Each operation makes one attack attempt with raw syscalls and prints one line the
// test parses: "errno N" (0 = the call succeeded), or the data an operation reports. It never
// depends on the image (static, no interpreter), so every image can run it.
#include <arpa/inet.h>
#include <fcntl.h>
#include <linux/bpf.h>
#include <linux/keyctl.h>
#include <linux/perf_event.h>
#include <linux/sched.h>
#include <netinet/in.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/ptrace.h>
#include <sys/shm.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

namespace {

// Prints the errno of a raw call's result (0 when it succeeded).
int report(long result) {
    std::printf("errno %d\n", result < 0 ? errno : 0);
    return 0;
}

long raw(long number, long a = 0, long b = 0, long c = 0, long d = 0, long e = 0) {
    return ::syscall(number, a, b, c, d, e);
}

// A call through the i386 ABI (int 0x80): a filter that looked only at the native ABI would let
// it through.
long i386_getpid() {
#if defined(__x86_64__)
    long result = 20;  // __NR_getpid on i386
    asm volatile("int $0x80" : "+a"(result) : : "memory");
    return result;
#else
    errno = ENOSYS;
    return -1;
#endif
}

// Runs `attempt` in a child so a signal (e.g. int 0x80 without IA32 emulation) is reported, not
// fatal for the probe.
template <typename F>
int in_child(F attempt) {
    const pid_t child = ::fork();
    if (child == 0) {
        std::fflush(stdout);
        ::_exit(attempt() ? 0 : 1);
    }
    int status = 0;
    ::waitpid(child, &status, 0);
    if (WIFSIGNALED(status)) {
        std::printf("signal %d\n", WTERMSIG(status));
    }
    return 0;
}

int connect_to(int family, const sockaddr* address, socklen_t length) {
    const int fd = ::socket(family, SOCK_STREAM, 0);
    if (fd < 0) {
        return report(-1);
    }
    return report(::connect(fd, address, length));
}

// Writes 1 MiB blocks until `bytes` were written or a write fails.
int flood(unsigned long long bytes) {
    std::vector<char> block(1 << 20, 'x');
    unsigned long long written = 0;
    while (written < bytes) {
        const auto want = std::min<unsigned long long>(block.size(), bytes - written);
        const ssize_t n = ::write(1, block.data(), want);
        if (n <= 0) {
            return 1;
        }
        written += static_cast<unsigned long long>(n);
    }
    return 0;
}

// Swaps two names with RENAME_EXCHANGE for `seconds`; prints how many swaps happened.
int swap_loop(const char* a, const char* b, double seconds) {
    timespec start{};
    ::clock_gettime(CLOCK_MONOTONIC, &start);
    long swaps = 0;
    for (;;) {
        for (int i = 0; i < 256; ++i) {
            if (raw(SYS_renameat2, AT_FDCWD, reinterpret_cast<long>(a), AT_FDCWD,
                    reinterpret_cast<long>(b), RENAME_EXCHANGE) == 0) {
                ++swaps;
            }
        }
        timespec now{};
        ::clock_gettime(CLOCK_MONOTONIC, &now);
        if (static_cast<double>(now.tv_sec - start.tv_sec) +
                static_cast<double>(now.tv_nsec - start.tv_nsec) / 1e9 >=
            seconds) {
            break;
        }
    }
    std::printf("swaps %ld\n", swaps);
    return 0;
}

// Creates `count` empty files in `dir`; prints how many were made and the errno that stopped it.
int make_files(const char* dir, long count) {
    const int dir_fd = ::open(dir, O_RDONLY | O_DIRECTORY);
    if (dir_fd < 0) {
        return report(-1);
    }
    long made = 0;
    int error = 0;
    char name[32];
    for (; made < count; ++made) {
        std::snprintf(name, sizeof name, "f%07ld", made);
        const int fd = ::openat(dir_fd, name, O_WRONLY | O_CREAT | O_EXCL, 0644);
        if (fd < 0) {
            error = errno;
            break;
        }
        ::close(fd);
    }
    std::printf("made %ld errno %d\n", made, error);
    return 0;
}

// Nests `depth` directories named `name` below `dir` by fd (no path length limit applies).
int nest(const char* dir, long depth, const char* name) {
    int fd = ::open(dir, O_RDONLY | O_DIRECTORY);
    long made = 0;
    int error = 0;
    for (; fd >= 0 && made < depth; ++made) {
        if (::mkdirat(fd, name, 0755) != 0 && errno != EEXIST) {
            error = errno;
            break;
        }
        const int next = ::openat(fd, name, O_RDONLY | O_DIRECTORY);
        ::close(fd);
        fd = next;
        if (fd < 0) {
            error = errno;
            break;
        }
    }
    if (fd >= 0) {
        ::close(fd);
    }
    std::printf("made %ld errno %d\n", made, error);
    return 0;
}

// Allocates and touches `bytes` in 16 MiB steps; prints how far it got (it is killed first when
// the memory limit is lower).
int hog(unsigned long long bytes) {
    const std::size_t step = 16ull << 20;
    unsigned long long total = 0;
    while (total < bytes) {
        auto* block = static_cast<char*>(std::malloc(step));
        if (block == nullptr) {
            std::printf("malloc failed at %llu\n", total);
            return 1;
        }
        std::memset(block, 1, step);
        total += step;
    }
    std::printf("allocated %llu\n", total);
    return 0;
}

int usage() {
    std::fprintf(stderr, "usage: maf-security-probe OPERATION [ARGS...]\n");
    return 2;
}

}  // namespace

// The host-wide TCP memory in use, in pages (/proc/net/sockstat's "TCP: ... mem N" is global,
// not per network namespace).
long tcp_mem_pages() {
    FILE* file = std::fopen("/proc/net/sockstat", "r");
    if (file == nullptr) {
        return -1;
    }
    char line[256];
    long pages = -1;
    while (std::fgets(line, sizeof line, file) != nullptr) {
        if (std::strncmp(line, "TCP:", 4) == 0) {
            const char* mem = std::strstr(line, " mem ");
            pages = mem != nullptr ? std::strtol(mem + 5, nullptr, 10) : -1;
        }
    }
    std::fclose(file);
    return pages;
}

// Opens `count` loopback connections in the sandbox's own network namespace and fills each
// (non-blocking, up to 8 MiB) without ever reading, for at most 20 s. Prints the bytes the kernel
// took and the host's TCP memory (pages) before and while they are all held.
int tcp_fill(long count) {
    const int listener = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof addr;
    if (listener < 0 || ::bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
        ::listen(listener, static_cast<int>(count)) != 0 ||
        ::getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
        return report(-1);
    }
    const long before = tcp_mem_pages();
    timespec start{};
    ::clock_gettime(CLOCK_MONOTONIC, &start);
    std::vector<int> fds;
    static char chunk[65536];
    long long queued = 0;
    for (long i = 0; i < count; ++i) {
        const int client = ::socket(AF_INET, SOCK_STREAM, 0);
        if (client < 0 || ::connect(client, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
            break;
        }
        const int server = ::accept(listener, nullptr, nullptr);
        fds.push_back(client);
        fds.push_back(server);
        ::fcntl(client, F_SETFL, O_NONBLOCK);
        for (long long sent = 0; sent < (8ll << 20);) {
            const ssize_t n = ::send(client, chunk, sizeof chunk, MSG_NOSIGNAL);
            if (n <= 0) {
                break;
            }
            sent += n;
            queued += n;
        }
        timespec now{};
        ::clock_gettime(CLOCK_MONOTONIC, &now);
        if (now.tv_sec - start.tv_sec > 20) {
            break;
        }
    }
    std::printf("queued %lld before %ld after %ld\n", queued, before, tcp_mem_pages());
    for (const int fd : fds) {
        ::close(fd);
    }
    ::close(listener);
    return 0;
}

int main(int argc, char** argv) {
    if (argc < 2) {
        return usage();
    }
    const std::string_view op = argv[1];
    const auto arg = [&](int i) -> const char* { return i + 1 < argc ? argv[i + 1] : ""; };

    // --- mounts and namespaces
    if (op == "mount") {
        return report(::mount("none", "/tmp", "tmpfs", 0, nullptr));
    }
    if (op == "bind-mount") {
        return report(::mount("/", "/tmp", nullptr, MS_BIND | MS_REC, nullptr));
    }
    if (op == "umount") {
        return report(::umount2(arg(1), MNT_DETACH));
    }
    if (op == "unshare") {  // flags in hex
        return report(::unshare(static_cast<int>(std::strtoul(arg(1), nullptr, 16))));
    }
    if (op == "clone") {  // raw clone with namespace flags (hex)
        const long pid =
            raw(SYS_clone, static_cast<long>(std::strtoul(arg(1), nullptr, 16)) | SIGCHLD);
        if (pid == 0) {
            ::_exit(0);
        }
        if (pid > 0) {
            ::waitpid(static_cast<pid_t>(pid), nullptr, 0);
        }
        return report(pid);
    }
    if (op == "clone3") {
        clone_args args{};
        args.flags = CLONE_NEWUSER;
        args.exit_signal = SIGCHLD;
        const long pid = raw(SYS_clone3, reinterpret_cast<long>(&args), sizeof args);
        if (pid == 0) {
            ::_exit(0);
        }
        return report(pid);
    }
    if (op == "setns") {  // setns into a namespace file (e.g. /proc/1/ns/mnt)
        const int fd = ::open(arg(1), O_RDONLY);
        if (fd < 0) {
            return report(-1);
        }
        return report(::setns(fd, 0));
    }
    if (op == "chroot") {
        return report(::chroot(arg(1)));
    }
    if (op == "pivot_root") {
        return report(
            raw(SYS_pivot_root, reinterpret_cast<long>("/tmp"), reinterpret_cast<long>("/tmp")));
    }
    if (op == "open_tree") {
        return report(raw(SYS_open_tree, AT_FDCWD, reinterpret_cast<long>("/"), 1 /*CLONE*/));
    }
    if (op == "fsopen") {
        return report(raw(SYS_fsopen, reinterpret_cast<long>("tmpfs"), 0));
    }
    // --- other processes
    if (op == "ptrace-traceme") {
        return report(::ptrace(PTRACE_TRACEME, 0, nullptr, nullptr));
    }
    if (op == "ptrace-attach") {
        return report(::ptrace(PTRACE_ATTACH, std::atoi(arg(1)), nullptr, nullptr));
    }
    if (op == "process_vm_readv") {
        char buffer[8];
        iovec local{buffer, sizeof buffer};
        iovec remote{reinterpret_cast<void*>(0x400000), sizeof buffer};
        return report(raw(SYS_process_vm_readv, std::atoi(arg(1)), reinterpret_cast<long>(&local),
                          1, reinterpret_cast<long>(&remote), 1));
    }
    if (op == "kill") {  // kill PID SIGNAL
        return report(::kill(std::atoi(arg(1)), std::atoi(arg(2))));
    }
    if (op == "pidfd_open") {
        return report(raw(SYS_pidfd_open, std::atoi(arg(1)), 0));
    }
    // --- kernel surfaces
    if (op == "bpf") {
        bpf_attr attr{};
        return report(raw(SYS_bpf, BPF_MAP_CREATE, reinterpret_cast<long>(&attr), sizeof attr));
    }
    if (op == "keyctl") {
        return report(raw(SYS_keyctl, KEYCTL_GET_KEYRING_ID, KEY_SPEC_SESSION_KEYRING, 0));
    }
    if (op == "add_key") {
        return report(raw(SYS_add_key, reinterpret_cast<long>("user"), reinterpret_cast<long>("k"),
                          reinterpret_cast<long>("v"), 1, KEY_SPEC_PROCESS_KEYRING));
    }
    if (op == "io_uring") {
        char params[120] = {};
        return report(raw(SYS_io_uring_setup, 8, reinterpret_cast<long>(params)));
    }
    if (op == "tcp-fill") {
        return tcp_fill(std::strtol(arg(1), nullptr, 10));
    }
    if (op == "io_setup") {
        // The native AIO family, each with what a libaio user would pass: a context request of
        // 128 events, then calls on a made-up context (refused before the kernel looks at it).
        unsigned long ctx = 0;
        const long setup = raw(SYS_io_setup, 128, reinterpret_cast<long>(&ctx));
        if (setup == 0) {
            raw(SYS_io_destroy, static_cast<long>(ctx));
        }
        report(setup);
        report(raw(SYS_io_submit, 1, 0, 0));
        report(raw(SYS_io_getevents, 1, 0, 1, 0, 0));
        report(raw(SYS_io_destroy, 1));
        return 0;
    }
    if (op == "hugetlb") {
        // Each way to take pages from the host's huge-page pool, then an ordinary anonymous
        // mapping as the benign control. Whatever succeeds is given back at once.
        constexpr long kBytes = 2L << 20;
        // libc's mmap: raw() passes five arguments and mmap's sixth, the offset, must be 0.
        void* mapped = ::mmap(nullptr, kBytes, PROT_READ | PROT_WRITE,
                              MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB, -1, 0);
        if (mapped != MAP_FAILED) {
            ::munmap(mapped, kBytes);
        }
        report(mapped == MAP_FAILED ? -1 : 0);
        const long segment = raw(SYS_shmget, IPC_PRIVATE, kBytes, IPC_CREAT | SHM_HUGETLB | 0600);
        if (segment >= 0) {
            raw(SYS_shmctl, segment, IPC_RMID, 0);
        }
        report(segment);
        const long memfd = raw(SYS_memfd_create, reinterpret_cast<long>("probe"), MFD_HUGETLB);
        if (memfd >= 0) {
            ::close(static_cast<int>(memfd));
        }
        report(memfd);
        void* plain =
            ::mmap(nullptr, kBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (plain != MAP_FAILED) {
            ::munmap(plain, kBytes);
        }
        return report(plain == MAP_FAILED ? -1 : 0);
    }
    if (op == "perf_event_open") {
        perf_event_attr attr{};
        attr.size = sizeof attr;
        attr.type = PERF_TYPE_SOFTWARE;
        attr.config = PERF_COUNT_SW_CPU_CLOCK;
        return report(raw(SYS_perf_event_open, reinterpret_cast<long>(&attr), 0, -1, -1, 0));
    }
    if (op == "userfaultfd") {
        return report(raw(SYS_userfaultfd, O_CLOEXEC));
    }
    if (op == "open_by_handle_at") {
        struct {
            unsigned int bytes;
            int type;
            unsigned char data[128];
        } handle{8, 1, {}};  // a guessed ext4 handle: inode 2 (the root of the host filesystem)
        handle.data[0] = 2;
        return report(
            raw(SYS_open_by_handle_at, AT_FDCWD, reinterpret_cast<long>(&handle), O_RDONLY));
    }
    if (op == "name_to_handle_at") {
        struct {
            unsigned int bytes;
            int type;
            unsigned char data[128];
        } handle{128, 0, {}};
        int mount_id = 0;
        return report(raw(SYS_name_to_handle_at, AT_FDCWD, reinterpret_cast<long>("/"),
                          reinterpret_cast<long>(&handle), reinterpret_cast<long>(&mount_id), 0));
    }
    if (op == "kernel") {  // modules, kexec, reboot, swap, syslog, clock: one errno per line
        report(raw(SYS_init_module, 0, 0, reinterpret_cast<long>("")));
        report(raw(SYS_finit_module, 0, reinterpret_cast<long>(""), 0));
        report(raw(SYS_kexec_load, 0, 0, 0, 0));
        report(raw(SYS_reboot, 0xfee1dead, 0x28121969, 0x4321fedc));  // RB_POWER_OFF
        report(raw(SYS_swapon, reinterpret_cast<long>("/tmp/none"), 0));
        report(raw(SYS_syslog, 3 /*READ_ALL*/, 0, 0));
        timespec now{};
        ::clock_gettime(CLOCK_REALTIME, &now);
        report(raw(SYS_clock_settime, CLOCK_REALTIME, reinterpret_cast<long>(&now)));
        return report(raw(SYS_acct, reinterpret_cast<long>("/tmp/acct")));
    }
    if (op == "i386") {
        return in_child([] {
            const long result = i386_getpid();
            std::printf("result %ld\n", result);
            std::fflush(stdout);
            return true;
        });
    }
    if (op == "x32") {  // unshare(CLONE_NEWUSER) through the x32 ABI bit
        return report(raw(0x40000000L | SYS_unshare, CLONE_NEWUSER));
    }
    if (op == "tiocsti") {  // on fd N; the request in hex (TIOCSTI, or with high bits set)
        char byte = 'x';
        return report(::ioctl(std::atoi(arg(1)), std::strtoul(arg(2), nullptr, 16), &byte));
    }
    if (op == "open") {  // open PATH FLAGS(hex)
        return report(::open(arg(1), static_cast<int>(std::strtoul(arg(2), nullptr, 16)), 0644));
    }
    // --- devices, ids, privileges
    if (op == "mknod") {  // mknod PATH c|b|p
        const char type = arg(2)[0];
        const mode_t kind = type == 'b' ? S_IFBLK : type == 'p' ? S_IFIFO : S_IFCHR;
        return report(::mknod(arg(1), kind | 0666, type == 'p' ? 0 : makedev(1, 3)));
    }
    if (op == "ids") {  // real and effective ids, no_new_privs, and whether setuid(0) works
        std::printf("uid %d euid %d gid %d egid %d nnp %d", ::getuid(), ::geteuid(), ::getgid(),
                    ::getegid(), ::prctl(PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0));
        const int set = ::setuid(0);
        std::printf(" setuid0 %d\n", set == 0 ? 0 : errno);
        return 0;
    }
    // --- network
    if (op == "socket") {  // socket FAMILY TYPE PROTOCOL
        return report(::socket(std::atoi(arg(1)), std::atoi(arg(2)), std::atoi(arg(3))));
    }
    if (op == "socket64") {  // socket with a 64-bit family argument (hex): FAMILY64 TYPE
        return report(raw(SYS_socket, static_cast<long>(std::strtoull(arg(1), nullptr, 16)),
                          std::atoi(arg(2)), 0));
    }
    if (op == "connect-abstract") {
        sockaddr_un address{};
        address.sun_family = AF_UNIX;
        const std::string_view name = arg(1);
        std::memcpy(address.sun_path + 1, name.data(), name.size());
        return connect_to(
            AF_UNIX, reinterpret_cast<sockaddr*>(&address),
            static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size()));
    }
    if (op == "connect-unix") {
        sockaddr_un address{};
        address.sun_family = AF_UNIX;
        std::strncpy(address.sun_path, arg(1), sizeof address.sun_path - 1);
        return connect_to(AF_UNIX, reinterpret_cast<sockaddr*>(&address), sizeof address);
    }
    if (op == "connect-tcp4") {
        sockaddr_in address{};
        address.sin_family = AF_INET;
        address.sin_port = htons(static_cast<uint16_t>(std::atoi(arg(2))));
        ::inet_pton(AF_INET, arg(1), &address.sin_addr);
        return connect_to(AF_INET, reinterpret_cast<sockaddr*>(&address), sizeof address);
    }
    if (op == "connect-tcp6") {
        sockaddr_in6 address{};
        address.sin6_family = AF_INET6;
        address.sin6_port = htons(static_cast<uint16_t>(std::atoi(arg(2))));
        ::inet_pton(AF_INET6, arg(1), &address.sin6_addr);
        return connect_to(AF_INET6, reinterpret_cast<sockaddr*>(&address), sizeof address);
    }
    // --- files
    if (op == "read") {  // prints the file's bytes, or its errno
        const int fd = ::open(arg(1), O_RDONLY);
        if (fd < 0) {
            return report(-1);
        }
        char buffer[4096];
        const ssize_t n = ::read(fd, buffer, sizeof buffer);
        if (n < 0) {
            return report(-1);
        }
        std::fwrite(buffer, 1, static_cast<std::size_t>(n), stdout);
        return 0;
    }
    if (op == "cat") {  // prints the whole file (a /proc file may take several reads), or errno
        const int fd = ::open(arg(1), O_RDONLY);
        if (fd < 0) {
            return report(-1);
        }
        char buffer[4096];
        ssize_t n = 0;
        while ((n = ::read(fd, buffer, sizeof buffer)) > 0) {
            std::fwrite(buffer, 1, static_cast<std::size_t>(n), stdout);
        }
        return n < 0 ? report(-1) : 0;
    }
    if (op == "link") {
        return report(::link(arg(1), arg(2)));
    }
    if (op == "swap") {  // swap A B SECONDS
        return swap_loop(arg(1), arg(2), std::atof(arg(3)));
    }
    if (op == "files") {  // files DIR COUNT
        return make_files(arg(1), std::atol(arg(2)));
    }
    if (op == "nest") {  // nest DIR DEPTH NAME
        return nest(arg(1), std::atol(arg(2)), arg(3));
    }
    // --- exhaustion
    if (op == "flood") {  // flood BYTES to stdout
        return flood(std::strtoull(arg(1), nullptr, 10));
    }
    if (op == "hog") {
        return hog(std::strtoull(arg(1), nullptr, 10));
    }
    if (op == "count-args") {  // how many arguments and environment entries arrived
        long env = 0;
        for (char** e = environ; *e != nullptr; ++e) {
            ++env;
        }
        std::printf("argc %d env %ld\n", argc, env);
        return 0;
    }
    return usage();
}
