// maf-security-budget-probe: a small static program the identity and budget tests copy into a
// sandbox and run as the guest (identity_budget_test.cpp). Each operation spends one host-wide
// kernel budget until the kernel refuses, or `limit` objects are made, and prints one line:
// "made N errno E", N the objects it got and E the errno of the refusal (0 when it stopped at
// `limit`). It then keeps what it made for `hold` seconds, or until
// /maf-sandbox/work/.budget-release exists, so the test can check the host while the budget is
// spent.
//   usage: maf-security-budget-probe OP LIMIT HOLD [DIR]
#include <fcntl.h>
#include <mqueue.h>
#include <sched.h>
#include <signal.h>
#include <sys/fanotify.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

int made(long count, int error) {
    std::printf("made %ld errno %d\n", count, error);
    return 0;
}

long number(const char* text) {
    return std::strtol(text, nullptr, 10);
}

// inotify instances until refused (or `limit`).
int inotify_instances(long limit) {
    long count = 0;
    for (; count < limit; ++count) {
        if (::inotify_init1(IN_CLOEXEC) < 0) {
            return made(count, errno);
        }
    }
    return made(count, 0);
}

// Watches of one instance on `limit` distinct files made under `dir`, until refused.
int inotify_watches(long limit, const char* dir) {
    const int fd = ::inotify_init1(IN_CLOEXEC);
    if (fd < 0) {
        return made(0, errno);
    }
    ::mkdir(dir, 0755);
    long count = 0;
    for (; count < limit; ++count) {
        const std::string path = std::string(dir) + "/" + std::to_string(count);
        const int file = ::open(path.c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0644);
        if (file < 0) {
            std::printf("file errno %d\n", errno);
            return made(count, 0);
        }
        ::close(file);
        if (::inotify_add_watch(fd, path.c_str(), IN_MODIFY) < 0) {
            return made(count, errno);
        }
    }
    return made(count, 0);
}

// Unprivileged fanotify groups (FAN_REPORT_FID is what an unprivileged caller may ask for).
int fanotify_groups(long limit) {
    long count = 0;
    for (; count < limit; ++count) {
        if (::fanotify_init(FAN_CLASS_NOTIF | FAN_REPORT_FID | FAN_CLOEXEC, O_RDONLY) < 0) {
            return made(count, errno);
        }
    }
    return made(count, 0);
}

// Real-time signals queued to ourselves while blocked, until the kernel refuses to queue more.
int queued_signals(long limit) {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGRTMIN);
    ::sigprocmask(SIG_BLOCK, &set, nullptr);
    long count = 0;
    for (; count < limit; ++count) {
        siginfo_t info{};
        info.si_signo = SIGRTMIN;
        info.si_code = SI_QUEUE;
        info.si_pid = ::getpid();
        info.si_uid = ::getuid();
        if (::syscall(SYS_rt_sigqueueinfo, ::getpid(), SIGRTMIN, &info) != 0) {
            return made(count, errno);
        }
    }
    return made(count, 0);
}

// POSIX message queues of 10 x 8 KiB each, until refused.
int message_queues(long limit) {
    long count = 0;
    for (; count < limit; ++count) {
        const std::string name = "/maf-budget-" + std::to_string(count);
        mq_attr attr{};
        attr.mq_maxmsg = 10;
        attr.mq_msgsize = 8192;
        if (::mq_open(name.c_str(), O_CREAT | O_RDWR | O_CLOEXEC, 0600, &attr) == (mqd_t)-1) {
            return made(count, errno);
        }
    }
    return made(count, 0);
}

// Keeps what the operation made until `seconds` pass or /maf-sandbox/work/.budget-release exists.
void hold(long seconds) {
    for (long tick = 0;
         tick < seconds * 20 && ::access("/maf-sandbox/work/.budget-release", F_OK) != 0; ++tick) {
        ::usleep(50000);
    }
}

int user_namespace() {
    const int result = ::unshare(CLONE_NEWUSER);
    return made(result == 0 ? 1 : 0, result == 0 ? 0 : errno);
}

// As many processes as the pids limit allows, each holding as many open files as its
// RLIMIT_NOFILE allows (every open of /dev/null is a file of its own in the kernel's table),
// for `seconds` (or until released). Prints "made <files> errno 0 procs <processes>".
int file_table(long seconds) {
    int counts[2];
    if (::pipe(counts) != 0) {
        return made(0, errno);
    }
    std::vector<pid_t> children;
    for (;;) {
        const pid_t child = ::fork();
        if (child < 0) {
            break;
        }
        if (child == 0) {
            ::close(counts[0]);
            long opened = 0;
            while (::open("/dev/null", O_RDONLY) >= 0) {
                ++opened;
            }
            [[maybe_unused]] auto n = ::write(counts[1], &opened, sizeof opened);
            ::close(counts[1]);  // the parent reads until every worker has reported
            hold(seconds);
            ::_exit(0);
        }
        children.push_back(child);
        if (children.size() >= 100000) {
            break;
        }
    }
    ::close(counts[1]);
    long total = 0;
    long opened = 0;
    while (::read(counts[0], &opened, sizeof opened) == sizeof opened) {
        total += opened;
    }
    std::printf("made %ld errno 0 procs %zu\n", total, children.size());
    for (const pid_t child : children) {
        ::waitpid(child, nullptr, 0);  // they hold their files until released
    }
    return 0;
}

int run(const std::string& op, long limit, long seconds, const char* dir) {
    if (op == "inotify") {
        return inotify_instances(limit);
    }
    if (op == "inotify-watches" && dir != nullptr) {
        return inotify_watches(limit, dir);
    }
    if (op == "fanotify") {
        return fanotify_groups(limit);
    }
    if (op == "sigqueue") {
        return queued_signals(limit);
    }
    if (op == "mqueue") {
        return message_queues(limit);
    }
    if (op == "userns") {
        return user_namespace();
    }
    if (op == "files") {
        return file_table(seconds);
    }
    return 2;
}

}  // namespace

int main(int argc, char** argv) {
    std::setvbuf(stdout, nullptr, _IONBF, 0);
    if (argc < 4) {
        std::fprintf(stderr,
                     "usage: %s inotify|inotify-watches|fanotify|sigqueue|mqueue|userns|files "
                     "LIMIT HOLD-SECONDS [DIR]\n",
                     argv[0]);
        return 2;
    }
    const long seconds = number(argv[3]);
    const int status = run(argv[1], number(argv[2]), seconds, argc > 4 ? argv[4] : nullptr);
    if (status == 0 && std::string(argv[1]) != "files") {
        hold(seconds);
    }
    return status;
}
