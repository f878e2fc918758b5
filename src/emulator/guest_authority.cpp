#include "guest_authority.hpp"

#include <fcntl.h>
#include <grp.h>
#include <linux/capability.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>
#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <exception>
#include <optional>

#include "maf_sandbox/runtime/kernel/fd_passing.hpp"

namespace maf_sandbox::emulator {
namespace {

// Errors of the child's own set-up, before any guest name is looked at.
struct EnterFailure {
    const char* step;
    int error;
};

void check(bool ok, const char* step) {
    if (!ok) {
        throw EnterFailure{step, errno};
    }
}

// Closes every descriptor except `keep` (the emulator's sockets, other sandboxes' descriptors
// and the other workers' channels are none of this child's business).
void close_all_but(std::array<int, 4> keep) {
    std::sort(keep.begin(), keep.end());
    unsigned next = 3;
    for (const int fd : keep) {
        if (fd >= static_cast<int>(next)) {
            if (static_cast<unsigned>(fd) > next) {
                ::syscall(SYS_close_range, next, static_cast<unsigned>(fd) - 1, 0);
            }
            next = static_cast<unsigned>(fd) + 1;
        }
    }
    ::syscall(SYS_close_range, next, ~0U, 0);
}

// Keeps only what a root user needs to reach any of its own files: the five file capabilities, in
// the sandbox's user namespace (the only one this process has any capability in after setns).
void keep_file_capabilities() {
    __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
    __user_cap_data_struct data[2]{};
    for (const int cap :
         {CAP_CHOWN, CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH, CAP_FOWNER, CAP_FSETID}) {
        data[cap / 32].effective |= 1u << (cap % 32);
        data[cap / 32].permitted |= 1u << (cap % 32);
    }
    check(::syscall(SYS_capset, &header, data) == 0, "dropping capabilities");
}

// The child's confinement recipe, in order. Starts as host root in the host's namespaces; ends as
// the guest's root, rooted at the guest's root, in the sandbox's user and mount namespaces.
void enter(const GuestAuthority& authority, pid_t parent, int descriptor_channel) {
    // The emulator's handlers (SIGTERM to the process group) must not run here.
    for (const int signal : {SIGTERM, SIGINT, SIGHUP, SIGCHLD}) {
        ::signal(signal, SIG_DFL);
    }
    ::signal(SIGPIPE, SIG_IGN);
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    close_all_but({authority.user_ns.get(), authority.mount_ns.get(), authority.root.get(),
                   descriptor_channel});
    // Host root's supplementary groups would still grant group access (they are host gids);
    // dropped while this process may still change them.
    check(::setgroups(0, nullptr) == 0, "dropping supplementary groups");
    check(::setns(authority.user_ns.get(), CLONE_NEWUSER) == 0,
          "joining the sandbox's user namespace");
    check(::setns(authority.mount_ns.get(), CLONE_NEWNS) == 0,
          "joining the sandbox's mount namespace");
    // setns put us at the namespace's root; the guest's root is PID 1's (after its pivot_root).
    check(::fchdir(authority.root.get()) == 0, "entering the guest's root");
    check(::chroot(".") == 0, "rooting at the guest's root");
    check(::chdir("/") == 0, "entering the guest's root");
    check(::setresgid(0, 0, 0) == 0, "becoming the guest's root group");
    check(::setresuid(0, 0, 0) == 0, "becoming the guest's root");
    // After the uid change (which clears it): end with the worker that cloned us.
    ::prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
    if (::getppid() != parent) {
        ::_exit(1);
    }
    keep_file_capabilities();
    check(::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0, "setting no_new_privs");
    // This task shares the emulator's memory under the guest's uid: nothing of that uid may
    // ptrace it or read /proc/<pid>/mem. The guest cannot name it (another PID namespace); this is
    // the second lock (the uid change above already cleared the flag; kept explicit).
    ::prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
    // Modes asked for are modes given: mkdir 0755 makes 0755.
    ::umask(0);
    ::close(authority.user_ns.get());
    ::close(authority.mount_ns.get());
    ::close(authority.root.get());
}

// What the child reads and writes in the caller's memory.
struct ChildTask {
    const GuestAuthority& authority;
    const std::function<void(ReplyChannel&)>& operation;
    pid_t parent;
    GuestReply reply;
    std::uint64_t max_data;
    int descriptor_channel;  // the child's end, or -1
    std::optional<Refusal> error;
    bool answered = false;
};

int child_main(void* argument) {
    auto& task = *static_cast<ChildTask*>(argument);
    try {
        enter(task.authority, task.parent, task.descriptor_channel);
        ReplyChannel channel(task.reply, task.max_data, task.descriptor_channel);
        task.operation(channel);
        task.answered = true;
    } catch (const Refusal& e) {
        task.error = e;
    } catch (const EnterFailure& e) {
        // strerrordesc_np: no locale lookup, no lock another thread may hold.
        task.error = Refusal{
            500, "FileOperationFailed",
            fmt::format("The file operation could not enter the sandbox ({}: {}); check that the "
                        "sandbox is still running.",
                        e.step, ::strerrordesc_np(e.error))};
    } catch (const std::exception& e) {
        task.error = Refusal{500, "FileOperationFailed", e.what()};
    }
    ::_exit(0);
}

// The child's stack: its own mapping, lazily backed, released after the child is reaped.
class ChildStack {
  public:
    static constexpr std::size_t kBytes = 8u << 20;  // a recursive delete recurses per level
    ChildStack()
        : base_(::mmap(nullptr, kBytes, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK, -1, 0)) {}
    ChildStack(const ChildStack&) = delete;
    ChildStack& operator=(const ChildStack&) = delete;
    ~ChildStack() {
        if (base_ != MAP_FAILED) {
            ::munmap(base_, kBytes);
        }
    }
    bool valid() const { return base_ != MAP_FAILED; }
    void* top() const { return static_cast<char*>(base_) + kBytes; }

  private:
    void* base_;
};

}  // namespace

void ReplyChannel::data(std::string_view bytes) {
    if (reply_.data.size() + bytes.size() > max_data_) {
        throw Refusal{413, "FileTooLarge",
                      fmt::format("The file is larger than {} bytes.", max_data_)};
    }
    reply_.data.append(bytes);
}

void ReplyChannel::descriptor(int fd) {
    if (descriptor_channel_ < 0) {
        throw Refusal{500, "FileOperationFailed", "The file operation has no descriptor channel."};
    }
    if (!runtime::send_fd(descriptor_channel_, fd, 0)) {
        throw Refusal{
            500, "FileOperationFailed",
            fmt::format("Handing the open file back failed: {}.", ::strerrordesc_np(errno))};
    }
}

namespace {

// The descriptor the child sent, if it sent one (it has exited: the datagram waits queued).
runtime::UniqueFd receive_descriptor(int channel) {
    char byte = 0;
    return runtime::receive_fd(channel, byte, MSG_DONTWAIT);
}

}  // namespace

void ReplyChannel::done(std::string_view payload) {
    reply_.payload.assign(payload);
}

GuestReply run_with_guest_authority(const GuestAuthority& authority,
                                    const std::function<void(ReplyChannel&)>& operation,
                                    std::uint64_t max_data, bool pass_descriptor) {
    runtime::UniqueFd ours;
    runtime::UniqueFd theirs;
    if (pass_descriptor) {
        int pair[2];
        if (::socketpair(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0, pair) != 0) {
            throw Refusal{503, "ServiceUnavailable",
                          fmt::format("Starting the file operation failed: {}; retry later.",
                                      std::strerror(errno))};
        }
        ours.reset(pair[0]);
        theirs.reset(pair[1]);
    }
    ChildStack stack;
    if (!stack.valid()) {
        throw Refusal{503, "ServiceUnavailable",
                      "The host is out of memory for a file operation; retry later."};
    }
    ChildTask task{authority, operation,    ::getpid(),   {},
                   max_data,  theirs.get(), std::nullopt, false};
    // Returns once the child has exited (CLONE_VFORK: it never execs).
    const pid_t pid = ::clone(child_main, stack.top(), CLONE_VM | CLONE_VFORK | SIGCHLD, &task);
    if (pid < 0) {
        throw Refusal{503, "ServiceUnavailable",
                      fmt::format("Starting the file operation failed: {}; retry later.",
                                  std::strerror(errno))};
    }
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    if (task.error) {
        throw *task.error;
    }
    if (!task.answered) {
        throw Refusal{500, "FileOperationFailed",
                      fmt::format("The file operation ended without an answer (status {}); "
                                  "retry, and report it if it persists.",
                                  status)};
    }
    if (pass_descriptor) {
        task.reply.descriptor = receive_descriptor(ours.get());
    }
    return std::move(task.reply);
}

}  // namespace maf_sandbox::emulator
