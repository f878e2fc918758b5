// The proxy's last line of defence, its failure mode and the closed mode, each with a sandbox of
// its own:
// - without the operator's MAF_SANDBOX_EGRESS_ALLOW_PRIVATE switch, an allowed name that resolves
//   to a private, loopback or link-local (metadata) address is refused after resolution, so a
//   listed name pointed at an internal address (DNS rebinding's goal) reaches nothing;
// - a proxy that dies takes the guest's only route with it: requests fail, never go out directly;
// - closed egress has no proxy, no route and no way to the host's sockets.
#include <signal.h>

#include "battery_fixture.hpp"

namespace maf_sandbox::egress_testing {
namespace {

// A network whose names are all allowed, with the operator switch for private addresses off.
struct RangesWorld {
    TestNetwork network;
    TrapListener loopback_trap = TrapListener::loopback_tcp();
    EgressSandbox sandbox{network,
                          {"allowed.test", "private.test",
                           fmt::format("loopback.test:{}", loopback_trap.port()), "metadata.test"},
                          {.allow_private = false}};
};

class EgressRanges : public SharedWorldTest<RangesWorld> {
  protected:
    void SetUp() override {
        SharedWorldTest::SetUp();
        if (HasFatalFailure()) {
            return;
        }
        a_before_ = world().network.allowed_host().traffic();
        log_before_ = world().sandbox.decisions().size();
    }

    // Refused by the proxy itself (403 with a reason, logged), and nothing reached host A.
    void expect_refused_after_resolution(const CurlOutput& out, const std::string& host) {
        EXPECT_TRUE(out.status == 403 || out.connect_status == 403) << out.describe();
        EXPECT_FALSE(out.deny_reason().empty()) << out.describe();
        EXPECT_EQ(world().network.allowed_host().traffic(), a_before_);
        const auto denial = await_denial(world().sandbox, log_before_, host);
        ASSERT_TRUE(denial.has_value()) << "no refusal of " << host << " was logged:\n"
                                        << describe_log(world().sandbox.decisions());
        EXPECT_FALSE(denial->reason.empty());
    }

    HostTraffic a_before_;
    std::size_t log_before_ = 0;
};

TEST_F(EgressRanges, AllowedNameResolvingToAPrivateAddressIsRefusedWithoutTheOperatorSwitch) {
    expect_refused_after_resolution(world().sandbox.curl("http://allowed.test/"), "allowed.test");
    expect_refused_after_resolution(world().sandbox.curl("https://private.test/"), "private.test");
}

TEST_F(EgressRanges, AllowedNameResolvingToLoopbackIsRefused) {
    const auto port = world().loopback_trap.port();
    expect_refused_after_resolution(
        world().sandbox.curl(fmt::format("http://loopback.test:{}/", port)), "loopback.test");
    EXPECT_EQ(world().loopback_trap.arrivals(), 0);
}

TEST_F(EgressRanges, AllowedNameResolvingToTheMetadataAddressIsRefused) {
    expect_refused_after_resolution(world().sandbox.curl("http://metadata.test/latest/meta-data/"),
                                    "metadata.test");
}

// --- Closed egress
// ---------------------------------------------------------------------------------

TEST(EgressClosed, ClosedSandboxHasNoProxyNoRouteAndNoHostSockets) {
    TestNetwork network;
    const std::string abstract_name = fmt::format("maf-egress-closed-{}", ::getpid());
    TrapListener abstract_trap = TrapListener::unix_socket(abstract_name, true);
    EgressSandbox sandbox(network, {}, {.mode = Egress::closed});
    const HostTraffic a_before = network.allowed_host().traffic();

    const auto env = sandbox.shell("env | grep -ci proxy || true");
    EXPECT_EQ(env.stdout_bytes, "0\n") << "closed egress must not name a proxy";
    EXPECT_EQ(sandbox.probe({"tcp", "127.0.0.1", "3128"}).get("outcome"), "refused");
    EXPECT_EQ(
        sandbox.probe({"tcp", network.allowed_host().addresses().host_ipv4, "80"}).get("outcome"),
        "refused");
    const auto dns = sandbox.probe(
        {"dns-udp", network.allowed_host().addresses().host_ipv4, "53", "allowed.test", "A"});
    EXPECT_NE(dns.get("outcome"), "answered") << dns.raw;
    EXPECT_FALSE(dns.get("outcome").empty()) << dns.raw;
    EXPECT_EQ(sandbox.probe({"unix-abstract", abstract_name}).get("outcome"), "refused");
    const auto curl = sandbox.curl("http://allowed.test/");
    EXPECT_NE(curl.exit_code, 0) << curl.describe();
    EXPECT_EQ(abstract_trap.arrivals(), 0);
    EXPECT_EQ(network.allowed_host().traffic(), a_before);
    EXPECT_TRUE(sandbox.decisions().empty());
}

// --- The proxy going away ------------------------------------------------------------------------

TEST(EgressProxyDown, KilledProxyFailsClosedAndNothingGoesOutDirectly) {
    TestNetwork network;
    EgressSandbox sandbox(network, battery_allowlist());
    // Control first: the route works while the proxy lives.
    const auto before = sandbox.curl("http://allowed.test/alive");
    ASSERT_EQ(before.status, 200) << before.describe();

    const auto pids = sandbox.proxy_pids();
    ASSERT_FALSE(pids.empty()) << "found no maf-egress-proxy process in the sandbox's cgroups";
    for (const pid_t pid : pids) {
        ASSERT_EQ(::kill(pid, SIGKILL), 0) << "killing the sandbox's proxy " << pid;
    }
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (!sandbox.proxy_pids().empty() && std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    ASSERT_TRUE(sandbox.proxy_pids().empty()) << "the proxy did not die";

    const HostTraffic a_before = network.allowed_host().traffic();
    const HostTraffic b_before = network.denied_host().traffic();
    const auto http = sandbox.curl("http://allowed.test/after");
    EXPECT_NE(http.exit_code, 0) << http.describe();
    EXPECT_NE(http.status, 200) << http.describe();
    const auto https = sandbox.curl("https://allowed.test/after");
    EXPECT_NE(https.exit_code, 0) << https.describe();
    const auto proxy = sandbox.probe({"tcp", "127.0.0.1", "3128"});
    const auto exchange =
        sandbox.probe({"raw", "127.0.0.1", "3128",
                       "GET http://allowed.test/ HTTP/1.1\\r\\nHost: allowed.test\\r\\n\\r\\n"});
    EXPECT_FALSE(exchange.served_by("A")) << exchange.raw;
    const auto direct = sandbox.probe({"tcp", network.allowed_host().addresses().host_ipv4, "80"});
    EXPECT_EQ(direct.get("outcome"), "refused") << direct.raw;
    EXPECT_EQ(network.allowed_host().traffic(), a_before)
        << "a request reached the allowed host with the proxy dead";
    EXPECT_EQ(network.denied_host().traffic(), b_before);
    // Said for the report: how the dead proxy's port behaves (refused, or accepted and silent).
    RecordProperty("proxy_port_after_kill", proxy.get("outcome"));
}

}  // namespace
}  // namespace maf_sandbox::egress_testing
