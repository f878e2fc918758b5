#include "loopback_namespace.hpp"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <utility>

#include <fmt/format.h>

#include "maf_sandbox/core/errors.hpp"
#include "maf_sandbox/runtime/kernel/namespaces.hpp"

namespace maf_sandbox::runtime {

namespace {

// What the child reports: the step that failed (0 = none) and its errno.
struct Outcome {
    int step = 0;
    int error = 0;
};
constexpr const char* kSteps[] = {"", "creating the network namespace",
                                  "bringing its loopback interface up",
                                  "opening ports below 1024 to the sandbox's users",
                                  "opening ICMP echo sockets to the sandbox's users"};

bool write_sysctl(const char* path, const char* value) noexcept {
    const int fd = ::open(path, O_WRONLY | O_CLOEXEC);
    const auto size = static_cast<ssize_t>(std::strlen(value));
    const bool written = fd >= 0 && ::write(fd, value, static_cast<std::size_t>(size)) == size;
    if (fd >= 0) {
        ::close(fd);
    }
    return written;
}

// "0 <last mapped gid>" from /proc/self/gid_map (read before any thread or lock matters: this
// runs in a forked child of a single-threaded process).
std::string mapped_gid_range() {
    std::uint64_t end = 1;
    if (FILE* map = std::fopen("/proc/self/gid_map", "re")) {
        unsigned long long inside = 0, outside = 0, count = 0;
        while (std::fscanf(map, "%llu %llu %llu", &inside, &outside, &count) == 3) {
            end = std::max<std::uint64_t>(end, inside + count);
        }
        std::fclose(map);
    }
    return fmt::format("0 {}", std::min<std::uint64_t>(end - 1, 2147483647));
}

[[noreturn]] void child_main(int status, int hold) {
    Outcome outcome;
    const auto fail = [&](int step) {
        outcome = {step, errno};
        [[maybe_unused]] auto n = ::write(status, &outcome, sizeof outcome);
        ::_exit(1);
    };
    if (::unshare(CLONE_NEWNET) != 0) {
        fail(1);
    }
    try {
        bring_up_loopback();
    } catch (const std::exception&) {
        fail(2);
    }
    // /proc/sys/net shows the opener's network namespace: this new one.
    if (!write_sysctl("/proc/sys/net/ipv4/ip_unprivileged_port_start", "0")) {
        fail(3);
    }
    // Rootless, the user namespace maps only some gids, and the kernel refuses a range that
    // names unmapped ones: then every gid the namespace has.
    if (!write_sysctl("/proc/sys/net/ipv4/ping_group_range", "0 2147483647") &&
        !write_sysctl("/proc/sys/net/ipv4/ping_group_range", mapped_gid_range().c_str())) {
        fail(4);
    }
    [[maybe_unused]] auto n = ::write(status, &outcome, sizeof outcome);
    char byte;
    while (::read(hold, &byte, 1) < 0 && errno == EINTR) {
    }
    ::_exit(0);
}

}  // namespace

PendingLoopbackNamespace PendingLoopbackNamespace::start() {
    int status[2], hold[2];
    if (::pipe2(status, O_CLOEXEC) != 0) {
        throw SystemError(errno, "creating the network namespace's status pipe");
    }
    UniqueFd status_read(status[0]), status_write(status[1]);
    if (::pipe2(hold, O_CLOEXEC) != 0) {
        throw SystemError(errno, "creating the network namespace's hold pipe");
    }
    UniqueFd hold_read(hold[0]), hold_write(hold[1]);
    const pid_t child = ::fork();
    if (child < 0) {
        throw SystemError(errno, "forking the network namespace's maker");
    }
    if (child == 0) {
        // The parent's ends: holding hold's write end here would keep the child alive for good.
        status_read.reset();
        hold_write.reset();
        child_main(status_write.get(), hold_read.get());
    }
    return PendingLoopbackNamespace(child, std::move(status_read), std::move(hold_write));
}

PendingLoopbackNamespace::PendingLoopbackNamespace(PendingLoopbackNamespace&& other) noexcept
    : child_(std::exchange(other.child_, -1)),
      status_(std::move(other.status_)),
      hold_(std::move(other.hold_)) {}

UniqueFd PendingLoopbackNamespace::take() {
    Outcome outcome{0, EPIPE};
    ssize_t n;
    while ((n = ::read(status_.get(), &outcome, sizeof outcome)) < 0 && errno == EINTR) {
    }
    if (n != sizeof outcome) {
        reap();
        throw SystemError(EPIPE, "the network namespace's maker exited without an answer");
    }
    if (outcome.step != 0) {
        reap();
        throw SystemError(outcome.error, fmt::format("{} for the sandbox", kSteps[outcome.step]),
                          "run as root on a kernel with network namespaces");
    }
    UniqueFd ns(::open(fmt::format("/proc/{}/ns/net", child_).c_str(), O_RDONLY | O_CLOEXEC));
    const int error = errno;
    reap();
    if (!ns) {
        throw SystemError(error, "opening the sandbox's network namespace");
    }
    return ns;
}

void PendingLoopbackNamespace::reap() noexcept {
    if (child_ <= 0) {
        return;
    }
    hold_.reset();  // the child's read returns: it exits
    ::waitpid(std::exchange(child_, -1), nullptr, 0);
}

PendingLoopbackNamespace::~PendingLoopbackNamespace() {
    if (child_ > 0) {
        ::kill(child_, SIGKILL);
        reap();
    }
}

}  // namespace maf_sandbox::runtime
