// The filter the supervisor stacks on slirp4netns's own: slirp4netns's deny-list lets
// native AIO and io_uring through, and both spend host-wide budgets no namespace divides
// (fs.aio-max-nr for one). Our filter answers each of them ENOSYS, as the guest's does, and
// leaves every other call alone. Proven in a forked child of the test that installs exactly the
// program slirp4netns gets; the control is the same calls before the install. That a running
// slirp4netns carries the filter, and still carries the sandbox's traffic, is
// tests/egress/service_identity_test.cpp.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <linux/aio_abi.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "maf_sandbox/runtime/kernel/seccomp.hpp"

namespace maf_sandbox::security {
namespace {

// The errno of each call, 0 for success (a context made is destroyed at once). io_uring_setup is
// given no parameters: the kernel answers EFAULT (or EPERM where io_uring is disabled), never
// ENOSYS, unless a filter refuses it.
struct Answers {
    int io_setup = -1;
    int io_submit = -1;
    int io_getevents = -1;
    int io_uring_setup = -1;
    int io_uring_register = -1;
    int getppid = -1;
    int pipe = -1;
};

Answers answers() {
    const auto err = [](long rc) { return rc < 0 ? errno : 0; };
    Answers out;
    aio_context_t ctx = 0;
    out.io_setup = err(::syscall(SYS_io_setup, 8, &ctx));
    if (out.io_setup == 0) {
        ::syscall(SYS_io_destroy, ctx);
    }
    out.io_submit = err(::syscall(SYS_io_submit, 0, 0, nullptr));
    out.io_getevents = err(::syscall(SYS_io_getevents, 0, 0, 0, nullptr, nullptr));
    out.io_uring_setup = err(::syscall(SYS_io_uring_setup, 1, nullptr));
    out.io_uring_register = err(::syscall(SYS_io_uring_register, -1, 0, nullptr, 0));
    out.getppid = err(::syscall(SYS_getppid));
    int fds[2];
    out.pipe = err(::pipe(fds));
    return out;
}

// The answers in a forked child, after it installed slirp4netns's extra filter when `filtered`.
Answers answers_in_child(bool filtered) {
    const auto& program = runtime::slirp_seccomp_program();
    int channel[2];
    EXPECT_EQ(::pipe(channel), 0);
    const pid_t child = ::fork();
    if (child == 0) {
        ::close(channel[0]);
        if (filtered && !runtime::install_seccomp(program)) {
            ::_exit(1);
        }
        const Answers out = answers();
        ::_exit(::write(channel[1], &out, sizeof out) == sizeof out ? 0 : 2);
    }
    ::close(channel[1]);
    Answers out;
    const bool read = ::read(channel[0], &out, sizeof out) == sizeof out;
    ::close(channel[0]);
    int status = 0;
    ::waitpid(child, &status, 0);
    EXPECT_TRUE(read && WIFEXITED(status) && WEXITSTATUS(status) == 0)
        << "the child could not install the filter or report";
    return out;
}

TEST(SlirpFilter, NativeAioAndIoUringAnswerEnosysUnderIt) {
    // Control: without the filter the kernel itself answers, and never ENOSYS.
    const auto plain = answers_in_child(false);
    EXPECT_EQ(plain.io_setup, 0);
    EXPECT_NE(plain.io_submit, ENOSYS);
    EXPECT_NE(plain.io_getevents, ENOSYS);
    EXPECT_NE(plain.io_uring_setup, ENOSYS);
    EXPECT_NE(plain.io_uring_register, ENOSYS);

    const auto filtered = answers_in_child(true);
    EXPECT_EQ(filtered.io_setup, ENOSYS);
    EXPECT_EQ(filtered.io_submit, ENOSYS);
    EXPECT_EQ(filtered.io_getevents, ENOSYS);
    EXPECT_EQ(filtered.io_uring_setup, ENOSYS);
    EXPECT_EQ(filtered.io_uring_register, ENOSYS);
    // Everything else is slirp4netns's own filter's business.
    EXPECT_EQ(filtered.getppid, 0);
    EXPECT_EQ(filtered.pipe, 0);
}

}  // namespace
}  // namespace maf_sandbox::security
