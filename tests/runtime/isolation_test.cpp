// What a guest cannot see or do: host processes, host loopback, host files, mount/ptrace/unshare.
#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fstream>

#include "sandbox_fixture.hpp"

namespace maf_sandbox::runtime::testing {
namespace {

class Isolation : public ::testing::Test {
  protected:
    static void SetUpTestSuite() {
        state_ = new StateDir();
        sandbox_ = new ScopedSandbox(host_launch(state_->path(), unique_id()));
    }
    static void TearDownTestSuite() {
        delete sandbox_;
        delete state_;
    }
    static StateDir* state_;
    static ScopedSandbox* sandbox_;
};
StateDir* Isolation::state_ = nullptr;
ScopedSandbox* Isolation::sandbox_ = nullptr;

// A python3 snippet that prints the errno of a raw syscall (0 when it succeeded).
std::string errno_of(const std::string& call) {
    return "/usr/bin/python3 -c 'import ctypes,os; libc=ctypes.CDLL(None, use_errno=True); "
           "r=" +
           call + "; print(0 if r==0 else ctypes.get_errno())'";
}

TEST_F(Isolation, GuestSeesOnlyItsOwnProcessesAndHostname) {
    const auto reply = sandbox_->sh("ls -d /proc/[0-9]* | wc -l; cat /proc/1/comm; hostname");
    ASSERT_EQ(reply.exit_code, 0) << reply.stderr_head;
    std::istringstream lines(reply.stdout_head);
    int count = 0;
    std::string init, hostname;
    lines >> count >> init >> hostname;
    // PID 1, the exec handler, sh, ls, wc, and up to two spare handlers with their guests.
    EXPECT_LT(count, 10) << reply.stdout_head;
    EXPECT_EQ(init, "maf-sandbox-sup");
    EXPECT_EQ(hostname, "sandbox");
    // The test process itself is invisible by its host pid's command line.
    const auto all =
        sandbox_->sh("for f in /proc/[0-9]*/cmdline; do tr '\\0' ' ' < $f; echo; done");
    EXPECT_EQ(all.stdout_head.find("bin/runtime_tests"), std::string::npos) << all.stdout_head;
    EXPECT_NE(all.stdout_head.find("maf-sandbox-supervisor"), std::string::npos) << all.stdout_head;
}

TEST_F(Isolation, GuestEnvironmentIsBuiltFromAnExplicitList) {
    ::setenv("MAF_TEST_HOST_SECRET", "do-not-leak", 1);
    const auto reply = sandbox_->sh("env");
    EXPECT_EQ(reply.stdout_head.find("MAF_TEST_HOST_SECRET"), std::string::npos);
    EXPECT_NE(reply.stdout_head.find("PATH="), std::string::npos);
}

TEST_F(Isolation, GuestCannotConnectToAHostLoopbackListener) {
    const int listener = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(::bind(listener, reinterpret_cast<sockaddr*>(&address), sizeof address), 0);
    ASSERT_EQ(::listen(listener, 4), 0);
    socklen_t length = sizeof address;
    ::getsockname(listener, reinterpret_cast<sockaddr*>(&address), &length);
    const int port = ntohs(address.sin_port);

    const auto reply = sandbox_->sh(
        fmt::format("/usr/bin/python3 -c 'import socket; s=socket.socket(); s.settimeout(2); "
                    "print(s.connect_ex((\"127.0.0.1\", {})))'; ip -o link 2>/dev/null | wc -l",
                    port));
    EXPECT_NE(reply.stdout_head.rfind("0\n", 0), 0u)
        << "the guest connected: " << reply.stdout_head;
    EXPECT_EQ(::accept(listener, nullptr, nullptr), -1);  // nothing ever arrived
    ::close(listener);
}

TEST_F(Isolation, GuestHasOnlyLoopbackAndNoRoute) {
    const auto reply = sandbox_->sh(
        "cat /proc/net/dev | tail -n +3 | cut -d: -f1 | tr -d ' '; "
        "cat /proc/net/route | tail -n +2 | wc -l");
    EXPECT_EQ(reply.stdout_head, "lo\n0\n");
}

TEST_F(Isolation, GuestCannotReadAHostFileOutsideItsImage) {
    const auto secret = state_->path() / "host-secret.txt";
    std::ofstream(secret) << "top secret";
    const auto reply =
        sandbox_->sh(fmt::format("cat {} /etc/shadow /root/.bashrc", secret.string()));
    EXPECT_NE(reply.exit_code, 0);
    EXPECT_EQ(reply.stdout_head.find("top secret"), std::string::npos);
    EXPECT_NE(reply.stderr_head.find("No such file or directory"), std::string::npos)
        << reply.stderr_head;
}

TEST_F(Isolation, ImagePathsAreReadOnly) {
    const auto reply = sandbox_->sh(
        "touch /usr/bin/x 2>&1; touch /etc/x 2>&1; touch /maf-sandbox/work/ok && echo wrote");
    EXPECT_NE(reply.stdout_head.find("wrote"), std::string::npos) << reply.stdout_head;
    EXPECT_NE(reply.stdout_head.find("Read-only file system"), std::string::npos)
        << reply.stdout_head;
}

TEST_F(Isolation, GuestCannotMountPtraceOrUnshare) {
    const std::string script =
        errno_of("libc.mount(b\"none\", b\"/tmp\", b\"tmpfs\", 0, None)") + "; " +
        errno_of("libc.unshare(0x10000000)") + "; " +             // CLONE_NEWUSER
        errno_of("libc.unshare(0x00020000)") + "; " +             // CLONE_NEWNS
        errno_of("libc.ptrace(0, 0, None, None)") + "; " +        // PTRACE_TRACEME
        errno_of("libc.syscall(425, 8, None)") + "; " +           // io_uring_setup
        errno_of("libc.syscall(56, 0x20000000|17, 0, 0, 0, 0)");  // clone(CLONE_NEWPID)
    const auto reply = sandbox_->sh(script);
    EXPECT_EQ(reply.stdout_head, "1\n1\n1\n1\n1\n1\n") << reply.stderr_head;
}

TEST(IsolationRootInside, RootInsideStillCannotMountOrUnshareAndHasNoCapabilities) {
    StateDir state;
    auto launch = host_launch(state.path(), unique_id());
    launch.guest_uid = 0;
    launch.guest_gid = 0;
    ScopedSandbox sandbox(launch);
    const auto reply =
        sandbox.sh("id -u; grep -E '^Cap(Eff|Prm|Bnd)' /proc/self/status | awk '{print $2}'; " +
                   errno_of("libc.mount(b\"none\", b\"/tmp\", b\"tmpfs\", 0, None)") + "; " +
                   errno_of("libc.unshare(0x10000000)"));
    EXPECT_EQ(reply.stdout_head, "0\n0000000000000000\n0000000000000000\n0000000000000000\n1\n1\n")
        << reply.stderr_head;
}

}  // namespace
}  // namespace maf_sandbox::runtime::testing
