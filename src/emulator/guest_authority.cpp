#include "guest_authority.hpp"

#include <fcntl.h>
#include <grp.h>
#include <linux/capability.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
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

namespace maf_sandbox::emulator {
namespace {

using Clock = std::chrono::steady_clock;

constexpr char kData = 'D';
constexpr char kDone = 'K';
constexpr char kError = 'E';
constexpr std::size_t kHeaderBytes = 1 + sizeof(std::uint64_t);

// One frame: its kind, its size, its bytes. A caller that went away (deadline, cap) leaves nobody
// to answer: the child just ends.
void write_frame(int fd, char kind, std::string_view payload) {
    char header[kHeaderBytes];
    header[0] = kind;
    const std::uint64_t size = payload.size();
    std::memcpy(header + 1, &size, sizeof size);
    const std::string_view parts[] = {std::string_view(header, sizeof header), payload};
    for (const auto part : parts) {
        std::size_t done = 0;
        while (done < part.size()) {
            const auto n = ::write(fd, part.data() + done, part.size() - done);
            if (n < 0 && errno == EINTR) {
                continue;
            }
            if (n <= 0) {
                ::_exit(1);
            }
            done += static_cast<std::size_t>(n);
        }
    }
}

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
void enter(const GuestAuthority& authority, int channel, pid_t parent) {
    // The emulator's handlers (SIGTERM to the process group) must not run here.
    for (const int signal : {SIGTERM, SIGINT, SIGHUP, SIGCHLD}) {
        ::signal(signal, SIG_DFL);
    }
    ::signal(SIGPIPE, SIG_IGN);
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    close_all_but(
        {channel, authority.user_ns.get(), authority.mount_ns.get(), authority.root.get()});
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
    // After the uid change (which clears it): end with the worker that forked us.
    ::prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
    if (::getppid() != parent) {
        ::_exit(1);
    }
    keep_file_capabilities();
    check(::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0, "setting no_new_privs");
    // Guest processes of the same uid must not read this process's memory (a copy of the
    // emulator's); they cannot name it (another PID namespace), this is the second lock.
    ::prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
    // Modes asked for are modes given: mkdir 0755 makes 0755.
    ::umask(0);
    ::close(authority.user_ns.get());
    ::close(authority.mount_ns.get());
    ::close(authority.root.get());
}

[[noreturn]] void child_main(const GuestAuthority& authority, int channel, pid_t parent,
                             const std::function<void(ReplyChannel&)>& operation) {
    ReplyChannel reply(channel);
    std::string error;
    try {
        enter(authority, channel, parent);
        operation(reply);
        ::_exit(0);
    } catch (const PlaneError& e) {
        error = fmt::format("{}\n{}\n{}", e.status, e.title, e.detail);
    } catch (const EnterFailure& e) {
        // strerrordesc_np: no locale, no lock another thread of the emulator may have held.
        error = fmt::format(
            "500\nFileOperationFailed\nThe file operation could not enter the sandbox ({}: {}); "
            "check that the sandbox is still running.",
            e.step, ::strerrordesc_np(e.error));
    } catch (const std::exception& e) {
        error = fmt::format("500\nFileOperationFailed\n{}", e.what());
    }
    write_frame(channel, kError, error);
    ::_exit(0);
}

bool read_fully(int fd, char* out, std::size_t size, Clock::time_point deadline, bool& timed_out) {
    std::size_t done = 0;
    while (done < size) {
        const auto left =
            std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
        if (left <= 0) {
            timed_out = true;
            return false;
        }
        pollfd p{fd, POLLIN, 0};
        const int ready = ::poll(&p, 1, static_cast<int>(std::min<long long>(left, 60000)));
        if (ready < 0 && errno == EINTR) {
            continue;
        }
        if (ready <= 0) {
            continue;  // the deadline check above decides
        }
        const auto n = ::read(fd, out + done, size - done);
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n <= 0) {
            return false;
        }
        done += static_cast<std::size_t>(n);
    }
    return true;
}

// Reaps the child; kills it first unless it already answered.
class ChildProcess {
  public:
    explicit ChildProcess(pid_t pid) : pid_(pid) {}
    ChildProcess(const ChildProcess&) = delete;
    ChildProcess& operator=(const ChildProcess&) = delete;
    ~ChildProcess() {
        if (pid_ > 0) {
            if (!answered_) {
                ::kill(pid_, SIGKILL);
            }
            int status = 0;
            while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
            }
        }
    }
    void answered() { answered_ = true; }

  private:
    pid_t pid_;
    bool answered_ = false;
};

PlaneError parse_error(const std::string& text) {
    const auto first = text.find('\n');
    const auto second = first == std::string::npos ? first : text.find('\n', first + 1);
    if (second == std::string::npos) {
        return PlaneError{500, "FileOperationFailed", text};
    }
    int status = 500;
    try {
        status = std::stoi(text.substr(0, first));
    } catch (...) {
    }
    return PlaneError{status, text.substr(first + 1, second - first - 1), text.substr(second + 1)};
}

}  // namespace

void ReplyChannel::frame(char kind, std::string_view payload) {
    write_frame(fd_, kind, payload);
}

void ReplyChannel::data(std::string_view bytes) {
    frame(kData, bytes);
}

void ReplyChannel::done(std::string_view payload) {
    frame(kDone, payload);
}

GuestReply run_with_guest_authority(const GuestAuthority& authority,
                                    const std::function<void(ReplyChannel&)>& operation,
                                    std::uint64_t max_data, std::chrono::milliseconds deadline) {
    int pair[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) != 0) {
        throw PlaneError{500, "FileOperationFailed",
                         fmt::format("Creating the file operation's channel failed: {}; the host "
                                     "may be out of descriptors.",
                                     std::strerror(errno))};
    }
    runtime::UniqueFd ours(pair[0]);
    runtime::UniqueFd theirs(pair[1]);
    const pid_t parent = ::getpid();
    // fork, not a helper executable: the child is single-threaded (setns(CLONE_NEWUSER) needs
    // that), starts in ~0.2 ms, and already holds the request (a write's content) in its memory.
    const pid_t pid = ::fork();
    if (pid < 0) {
        throw PlaneError{503, "ServiceUnavailable",
                         fmt::format("Starting the file operation failed: {}; retry later.",
                                     std::strerror(errno))};
    }
    if (pid == 0) {
        child_main(authority, theirs.get(), parent, operation);
    }
    ChildProcess child(pid);
    theirs.reset();
    const auto until = Clock::now() + deadline;
    GuestReply reply;
    for (;;) {
        char header[kHeaderBytes];
        bool timed_out = false;
        if (!read_fully(ours.get(), header, sizeof header, until, timed_out)) {
            if (timed_out) {
                throw PlaneError{504, "FileOperationTimedOut",
                                 fmt::format("The file operation did not finish within {} s and "
                                             "was stopped; retry, or use a smaller file.",
                                             deadline.count() / 1000)};
            }
            throw PlaneError{500, "FileOperationFailed",
                             "The file operation ended without an answer; retry, and report it if "
                             "it persists."};
        }
        std::uint64_t size = 0;
        std::memcpy(&size, header + 1, sizeof size);
        const bool is_data = header[0] == kData;
        if (is_data && reply.data.size() + size > max_data) {
            throw PlaneError{413, "FileTooLarge",
                             fmt::format("The file is larger than {} bytes.", max_data)};
        }
        if (!is_data && size > (1u << 26)) {
            throw PlaneError{500, "FileOperationFailed",
                             "The file operation's answer is too large."};
        }
        std::string payload(size, '\0');
        if (!read_fully(ours.get(), payload.data(), payload.size(), until, timed_out)) {
            throw PlaneError{timed_out ? 504 : 500,
                             timed_out ? "FileOperationTimedOut" : "FileOperationFailed",
                             "The file operation ended before its answer was complete; retry."};
        }
        if (is_data) {
            reply.data += payload;
            continue;
        }
        child.answered();
        if (header[0] == kError) {
            throw parse_error(payload);
        }
        if (header[0] != kDone) {
            throw PlaneError{500, "FileOperationFailed", "The file operation answered garbage."};
        }
        reply.payload = std::move(payload);
        return reply;
    }
}

}  // namespace maf_sandbox::emulator
