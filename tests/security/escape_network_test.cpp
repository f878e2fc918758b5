// Escapes across the network namespace and the PID namespace: the host's abstract and path unix
// sockets, loopback over IPv4 and IPv6, raw and packet sockets, and signals to host processes.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>

#include "security_fixture.hpp"

namespace maf_sandbox::security {
namespace {

// A listening socket the test owns; accept() never blocks, so "nothing arrived" is checkable.
class Listener {
  public:
    Listener(int family, const sockaddr* address, socklen_t length) {
        fd_ = ::socket(family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd_ < 0 || ::bind(fd_, address, length) != 0 || ::listen(fd_, 8) != 0) {
            error_ = errno;
        }
    }
    ~Listener() {
        if (fd_ >= 0) {
            ::close(fd_);
        }
    }
    Listener(const Listener&) = delete;
    Listener& operator=(const Listener&) = delete;
    bool ok() const { return error_ == 0; }
    int error() const { return error_; }
    int port() const {
        sockaddr_storage address{};
        socklen_t length = sizeof address;
        ::getsockname(fd_, reinterpret_cast<sockaddr*>(&address), &length);
        return address.ss_family == AF_INET6
                   ? ntohs(reinterpret_cast<sockaddr_in6*>(&address)->sin6_port)
                   : ntohs(reinterpret_cast<sockaddr_in*>(&address)->sin_port);
    }
    bool nothing_arrived() const {
        const int connection = ::accept(fd_, nullptr, nullptr);
        if (connection >= 0) {
            ::close(connection);
            return false;
        }
        return true;
    }

  private:
    int fd_ = -1;
    int error_ = 0;
};

// A host process the test owns, killed and reaped when the test ends.
class HostChild {
  public:
    HostChild() {
        pid_ = ::fork();
        if (pid_ == 0) {
            ::pause();
            ::_exit(0);
        }
    }
    ~HostChild() {
        ::kill(pid_, SIGKILL);
        ::waitpid(pid_, nullptr, 0);
    }
    HostChild(const HostChild&) = delete;
    HostChild& operator=(const HostChild&) = delete;
    pid_t pid() const { return pid_; }
    bool alive() const { return ::waitpid(pid_, nullptr, WNOHANG) == 0; }

  private:
    pid_t pid_ = 0;
};

class NetworkEscape : public ::testing::Test {
  protected:
    static void SetUpTestSuite() { box_ = new Box(); }
    static void TearDownTestSuite() { delete box_; }
    static Box* box_;
};
Box* NetworkEscape::box_ = nullptr;

TEST_F(NetworkEscape, TheHostsAbstractUnixSocketIsUnreachable) {
    const std::string name = fmt::format("maf-sec-abstract-{}", ::getpid());
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    std::memcpy(address.sun_path + 1, name.data(), name.size());
    Listener listener(AF_UNIX, reinterpret_cast<sockaddr*>(&address),
                      static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size()));
    ASSERT_TRUE(listener.ok()) << "errno " << listener.error();
    EXPECT_EQ(box_->errno_of({"connect-abstract", name}), ECONNREFUSED);
    EXPECT_TRUE(listener.nothing_arrived());
}

TEST_F(NetworkEscape, TheSandboxsOwnExecSocketIsNotInTheGuest) {
    const auto socket = box_->handle().socket.string();
    EXPECT_EQ(box_->errno_of({"connect-unix", socket}), ENOENT);
}

TEST_F(NetworkEscape, HostLoopbackIsUnreachableOverIpv4) {
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    Listener listener(AF_INET, reinterpret_cast<sockaddr*>(&address), sizeof address);
    ASSERT_TRUE(listener.ok()) << "errno " << listener.error();
    EXPECT_EQ(box_->errno_of({"connect-tcp4", "127.0.0.1", std::to_string(listener.port())}),
              ECONNREFUSED);
    EXPECT_TRUE(listener.nothing_arrived());
}

TEST_F(NetworkEscape, HostLoopbackIsUnreachableOverIpv6) {
    sockaddr_in6 address{};
    address.sin6_family = AF_INET6;
    address.sin6_addr = in6addr_loopback;
    Listener listener(AF_INET6, reinterpret_cast<sockaddr*>(&address), sizeof address);
    const int port = listener.ok() ? listener.port() : 9;  // the host may lack ::1; still try
    const int error = box_->errno_of({"connect-tcp6", "::1", std::to_string(port)});
    EXPECT_TRUE(error == ECONNREFUSED || error == EADDRNOTAVAIL || error == ENETUNREACH)
        << "errno " << error;
    if (listener.ok()) {
        EXPECT_TRUE(listener.nothing_arrived());
    }
}

TEST_F(NetworkEscape, RawAndPacketSocketsAreRefused) {
    EXPECT_EQ(box_->errno_of({"socket", std::to_string(AF_INET), std::to_string(SOCK_RAW),
                              std::to_string(IPPROTO_ICMP)}),
              EPERM);
    EXPECT_EQ(box_->errno_of({"socket", std::to_string(AF_INET6), std::to_string(SOCK_RAW),
                              std::to_string(IPPROTO_ICMPV6)}),
              EPERM);
    EXPECT_EQ(box_->errno_of({"socket", std::to_string(AF_PACKET), std::to_string(SOCK_RAW), "0"}),
              EPERM);
}

TEST_F(NetworkEscape, VsockAndOtherFamiliesOutsideTheNetworkNamespaceAreRefused) {
    // AF_VSOCK is not confined by network namespaces: on a VM host it reaches the hypervisor
    // side (CID 2) whatever the guest's namespace says. Only socket creation is attempted here.
    for (const int family : {AF_VSOCK, AF_BLUETOOTH, AF_QIPCRTR}) {
        EXPECT_EQ(
            box_->errno_of({"socket", std::to_string(family), std::to_string(SOCK_STREAM), "0"}),
            EPERM)
            << "family " << family;
    }
    // The kernel reads the family as an int: high bits must not smuggle AF_VSOCK past the filter.
    EXPECT_EQ(box_->errno_of({"socket64", fmt::format("{:x}", 0x100000000ul | AF_VSOCK),
                              std::to_string(SOCK_STREAM)}),
              EPERM);
    // Netlink stays usable: it is the guest's own namespace it talks to.
    EXPECT_EQ(box_->errno_of({"socket", std::to_string(AF_NETLINK), std::to_string(SOCK_RAW), "0"}),
              0);
}

TEST_F(NetworkEscape, SignalsToAHostProcessNeverArrive) {
    HostChild child;
    const auto pid = std::to_string(child.pid());
    EXPECT_EQ(box_->errno_of({"kill", pid, "9"}), ESRCH);
    EXPECT_EQ(box_->errno_of({"pidfd_open", pid}), ESRCH);
    EXPECT_EQ(box_->errno_of({"ptrace-attach", pid}), EPERM);
    EXPECT_TRUE(child.alive());
}

TEST_F(NetworkEscape, KillOfEveryProcessTheGuestCanSignalStaysInsideTheSandbox) {
    HostChild child;
    const auto supervisor = box_->handle().pid;
    const auto result = box_->sh(fmt::format("sleep 100 & {} kill -1 9; wait", kProbe));
    EXPECT_EQ(result.stdout_bytes, "errno 0\n") << result.stderr_bytes;
    EXPECT_TRUE(child.alive());
    EXPECT_TRUE(runtime::live_process_start_time(supervisor).has_value());
}

// Disabled until the exec cgroup naming is fixed (docs/SECURITY.md, "Holes found"): after the
// guest's kill(-1, SIGKILL) the next exec often fails with "joining the exec's cgroup failed: No
// such device", because a new exec's cgroup name (exec-<handler pid>-<n>) collides with one that
// is being removed.
TEST_F(NetworkEscape, TheNextExecAfterTheGuestKillsEverythingItCanSucceeds) {
    for (int round = 0; round < 5; ++round) {
        box_->sh(fmt::format("sleep 100 & {} kill -1 9; wait", kProbe));
        EXPECT_EQ(box_->sh("echo still-serving").stdout_bytes, "still-serving\n");
    }
}

}  // namespace
}  // namespace maf_sandbox::security
