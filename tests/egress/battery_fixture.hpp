// The battery's shared fixture: one test network, one allowlist sandbox and three listeners of
// the test's own namespace that the guest must never reach (an abstract unix socket, a pathname
// unix socket and a TCP port on 127.0.0.1), built once per test suite. Under ctest every case is
// its own process, so the sharing only saves time when the binary runs whole.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/un.h>

#include <cstring>
#include <functional>

#include <fmt/ranges.h>

#include "egress_fixture.hpp"

namespace maf_sandbox::egress_testing {

// A listening socket nobody accepts from: whether anything connected is read afterwards with a
// non-blocking accept, since the kernel completes a connection into the backlog by itself.
class TrapListener {
  public:
    static TrapListener unix_socket(const std::string& name, bool abstract) {
        TrapListener trap;
        trap.fd_.reset(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
        sockaddr_un addr{};
        addr.sun_family = AF_UNIX;
        const std::size_t offset = abstract ? 1 : 0;
        std::memcpy(addr.sun_path + offset, name.data(), name.size());
        const auto size = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + offset +
                                                 name.size() + (abstract ? 0 : 1));
        trap.bind_and_listen(reinterpret_cast<sockaddr*>(&addr), size, name);
        return trap;
    }

    static TrapListener loopback_tcp() {
        TrapListener trap;
        trap.fd_.reset(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
        sockaddr_in addr{};
        addr.sin_family = AF_INET;
        addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        trap.bind_and_listen(reinterpret_cast<sockaddr*>(&addr), sizeof addr, "127.0.0.1:0");
        socklen_t size = sizeof addr;
        ::getsockname(trap.fd_.get(), reinterpret_cast<sockaddr*>(&addr), &size);
        trap.port_ = ntohs(addr.sin_port);
        return trap;
    }

    // Connections that arrived since the last call (each is accepted and closed).
    int arrivals() {
        int count = 0;
        while (true) {
            const int fd = ::accept4(fd_.get(), nullptr, nullptr, SOCK_CLOEXEC);
            if (fd < 0) {
                return count;
            }
            ::close(fd);
            ++count;
        }
    }
    std::uint16_t port() const { return port_; }

  private:
    void bind_and_listen(const sockaddr* addr, socklen_t size, const std::string& name) {
        if (!fd_ || ::bind(fd_.get(), addr, size) != 0 || ::listen(fd_.get(), 16) != 0) {
            throw SystemError(errno, "binding the trap listener " + name);
        }
    }
    runtime::UniqueFd fd_;
    std::uint16_t port_ = 0;
};

struct BatteryWorld {
    TestNetwork network;
    std::string abstract_name = fmt::format("maf-egress-host-{}", ::getpid());
    std::filesystem::path socket_path = network.directory() / "host.sock";
    TrapListener abstract_trap = TrapListener::unix_socket(abstract_name, true);
    TrapListener path_trap = TrapListener::unix_socket(socket_path.string(), false);
    TrapListener loopback_trap = TrapListener::loopback_tcp();
    EgressSandbox sandbox{network, battery_allowlist()};
};

// A test suite whose cases share one `World` (a network and a sandbox), built before the first
// case and destroyed after the last. A World that cannot be built fails every case with the reason.
template <class World>
class SharedWorldTest : public ::testing::Test {
  protected:
    static void SetUpTestSuite() {
        try {
            world_ = std::make_unique<World>();
        } catch (const std::exception& error) {
            setup_error_ = error.what();
        }
    }
    static void TearDownTestSuite() { world_.reset(); }
    void SetUp() override {
        ASSERT_NE(world_, nullptr)
            << "the test network or sandbox could not be built: " << setup_error_;
    }
    static World& world() { return *world_; }

  private:
    inline static std::unique_ptr<World> world_;
    inline static std::string setup_error_;
};

class EgressBattery : public SharedWorldTest<BatteryWorld> {
  protected:
    void SetUp() override {
        SharedWorldTest::SetUp();
        if (HasFatalFailure()) {
            return;
        }
        a_before_ = a().traffic();
        b_before_ = b().traffic();
        log_before_ = sandbox().decisions().size();
    }

    static TestHost& a() { return world().network.allowed_host(); }
    static TestHost& b() { return world().network.denied_host(); }
    static EgressSandbox& sandbox() { return world().sandbox; }

    // A raw exchange with the proxy on the guest's 127.0.0.1:3128; `request` may use the probe's
    // backslash escapes for CR, LF and bytes.
    static ProbeOutput to_proxy(const std::string& request) {
        return sandbox().probe(
            {"raw", "127.0.0.1", std::to_string(runtime::kGuestProxyPort), request});
    }

    // Nothing reached the denied host (and, unless told otherwise, the allowed one) since SetUp.
    void expect_denied_host_untouched() {
        EXPECT_EQ(b().traffic(), b_before_)
            << "the denied host was reached: " << describe(b().traffic()) << " (before "
            << describe(b_before_) << ")\n"
            << fmt::format("{}", fmt::join(b().log(), "\n"));
    }
    void expect_allowed_host_untouched() {
        EXPECT_EQ(a().traffic(), a_before_)
            << "the allowed host was reached outside the proxy's rules: " << describe(a().traffic())
            << " (before " << describe(a_before_) << ")\n"
            << fmt::format("{}", fmt::join(a().log(), "\n"));
    }
    // For refusals decided after the proxy opened its upstream connection (a ClientHello is read
    // once the CONNECT is answered): the allowed host may see a connection open and close, but
    // not one byte of what the guest sent.
    void expect_allowed_host_got_no_bytes() {
        EXPECT_FALSE(a().traffic().received_bytes_since(a_before_))
            << "guest bytes reached the allowed host: " << describe(a().traffic()) << " (before "
            << describe(a_before_) << ")\n"
            << fmt::format("{}", fmt::join(a().log(), "\n"));
    }
    void expect_no_host_touched() {
        expect_denied_host_untouched();
        expect_allowed_host_untouched();
    }

    // The proxy answered 403 (to the request, or to the CONNECT of an https URL) with an
    // x-deny-reason header.
    static void expect_proxy_refusal(const CurlOutput& out) {
        EXPECT_TRUE(out.status == 403 || out.connect_status == 403) << out.describe();
        EXPECT_FALSE(out.deny_reason().empty()) << "no x-deny-reason header:\n" << out.describe();
    }
    static void expect_proxy_refusal(const ProbeOutput& out) {
        EXPECT_TRUE(out.replied("HTTP/1.1 403") || out.get("connect-status") == "403") << out.raw;
        EXPECT_TRUE(out.replied("x-deny-reason:") || out.replied("X-Deny-Reason:"))
            << "no x-deny-reason header:\n"
            << out.raw;
    }

    // The decision log gained a refusal of `host` (lower-case) with a reason.
    void expect_denial_logged(const std::string& host) {
        const auto denial = await_denial(sandbox(), log_before_, host);
        ASSERT_TRUE(denial.has_value()) << "no refusal of " << host << " was logged; the log:\n"
                                        << describe_log(sandbox().decisions());
        EXPECT_FALSE(denial->reason.empty());
    }
    // The decision log gained any refusal with a reason, containing `reason_part` when given (for
    // cases where the host it names is the proxy's choice, such as a TLS refusal inside an allowed
    // CONNECT).
    void expect_any_denial_logged(const std::string& reason_part = {}) {
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
        for (;;) {
            const auto log = sandbox().decisions();
            for (std::size_t i = log_before_; i < log.size(); ++i) {
                if (!log[i].allowed && !log[i].reason.empty() &&
                    log[i].reason.find(reason_part) != std::string::npos) {
                    return;
                }
            }
            if (std::chrono::steady_clock::now() > deadline) {
                ADD_FAILURE() << "no refusal with a reason containing '" << reason_part
                              << "' was logged; the log:\n"
                              << describe_log(log);
                return;
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(50));
        }
    }

    // The positive control in the same sandbox, after the case: the allowed host answers through
    // the proxy, so the refusal was not a broken network.
    static void expect_control_reachable() {
        const auto out = sandbox().curl("http://allowed.test/control");
        EXPECT_EQ(out.status, 200) << "the allowed control request failed:\n" << out.describe();
        EXPECT_TRUE(out.served_by("A")) << out.describe();
    }

    HostTraffic a_before_;
    HostTraffic b_before_;
    std::size_t log_before_ = 0;
};

}  // namespace maf_sandbox::egress_testing
