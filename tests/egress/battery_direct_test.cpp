// Bypasses that skip the proxy: raw IPv4 and IPv6 connects, UDP, DNS to the test hosts, the
// host's loopback, link-local and unix sockets. The guest's namespace has no route and no other
// interface than loopback, so each must fail before a single packet reaches a host; the hosts'
// own counters prove nothing arrived. Each case ends with the allowed control request.
#include <arpa/inet.h>

#include <random>

#include "battery_fixture.hpp"

namespace maf_sandbox::egress_testing {
namespace {

// The probe ran and its datagram got no reply (it may also have been refused at send).
void expect_unanswered(const ProbeOutput& out) {
    const auto outcome = out.get("outcome");
    EXPECT_TRUE(outcome == "no-answer" || outcome == "refused") << out.raw;
}

std::string random_label() {
    std::random_device seed;
    std::mt19937_64 random(seed());
    return fmt::format("x{:016x}", random());
}

TEST_F(EgressBattery, RawIpv4ConnectToTheAllowedHostBypassingTheProxyIsRefused) {
    const auto out = sandbox().probe({"tcp", a().addresses().host_ipv4, "80"});
    EXPECT_EQ(out.get("outcome"), "refused") << out.raw;
    expect_no_host_touched();
    expect_control_reachable();
}

TEST_F(EgressBattery, RawIpv4ConnectToTheDeniedHostsTlsPortIsRefused) {
    const auto out = sandbox().probe({"tcp", b().addresses().host_ipv4, "443"});
    EXPECT_EQ(out.get("outcome"), "refused") << out.raw;
    expect_no_host_touched();
    expect_control_reachable();
}

TEST_F(EgressBattery, RawIpv6ConnectToTheAllowedHostIsRefused) {
    const auto out = sandbox().probe({"tcp", a().addresses().host_ipv6, "80"});
    EXPECT_EQ(out.get("outcome"), "refused") << out.raw;
    const auto mapped = sandbox().probe({"tcp", "::ffff:" + a().addresses().host_ipv4, "80"});
    EXPECT_EQ(mapped.get("outcome"), "refused") << mapped.raw;
    expect_no_host_touched();
    expect_control_reachable();
}

TEST_F(EgressBattery, UdpDatagramToTheAllowedHostGetsNoAnswer) {
    const auto v4 = sandbox().probe({"udp", a().addresses().host_ipv4, "9999"});
    expect_unanswered(v4);
    const auto v6 = sandbox().probe({"udp", a().addresses().host_ipv6, "9999"});
    expect_unanswered(v6);
    expect_no_host_touched();
    expect_control_reachable();
}

TEST_F(EgressBattery, DnsQueryForAnAllowedNameToATestHostGetsNoAnswer) {
    const auto out =
        sandbox().probe({"dns-udp", a().addresses().host_ipv4, "53", "allowed.test", "A"});
    expect_unanswered(out);
    const auto v6 =
        sandbox().probe({"dns-udp", a().addresses().host_ipv6, "53", "allowed.test", "AAAA"});
    expect_unanswered(v6);
    expect_no_host_touched();
    expect_control_reachable();
}

TEST_F(EgressBattery, DnsTxtQueryWithARandomLabelForADeniedNameGetsNoAnswer) {
    // The shape of DNS exfiltration: data in a fresh label, asking for TXT.
    const auto name = random_label() + ".denied.test";
    const auto out = sandbox().probe({"dns-udp", b().addresses().host_ipv4, "53", name, "TXT"});
    expect_unanswered(out);
    expect_no_host_touched();
    expect_control_reachable();
}

TEST_F(EgressBattery, DnsQueryOverTcpToATestHostIsRefused) {
    const auto out =
        sandbox().probe({"dns-tcp", a().addresses().host_ipv4, "53", "denied.test", "A"});
    EXPECT_EQ(out.get("outcome"), "refused") << out.raw;
    expect_no_host_touched();
    expect_control_reachable();
}

TEST_F(EgressBattery, DnsPortOfTheAllowedHostThroughTheProxyIsRefused) {
    // Port 53 is not one an allowlist entry without a port opens, so DNS cannot ride the proxy.
    const auto out = sandbox().probe({"tunnel-raw", "allowed.test:53", "query"});
    expect_proxy_refusal(out);
    expect_no_host_touched();
    expect_denial_logged("allowed.test");
    expect_control_reachable();
}

TEST_F(EgressBattery, HostLoopbackPortIsNotReachableFromTheGuestsLoopback) {
    // 127.0.0.1 in the guest is the sandbox's own loopback, never the host's.
    const auto port = std::to_string(world().loopback_trap.port());
    const auto out = sandbox().probe({"tcp", "127.0.0.1", port});
    EXPECT_EQ(out.get("outcome"), "refused") << out.raw;
    EXPECT_EQ(world().loopback_trap.arrivals(), 0);
    expect_control_reachable();
}

TEST_F(EgressBattery, LinkLocalMetadataAddressIsUnreachableDirectly) {
    const auto out = sandbox().probe({"tcp", "169.254.169.254", "80"});
    EXPECT_EQ(out.get("outcome"), "refused") << out.raw;
    const auto v6 = sandbox().probe({"tcp", "fe80::1", "80"});
    EXPECT_EQ(v6.get("outcome"), "refused") << v6.raw;
    expect_control_reachable();
}

TEST_F(EgressBattery, AbstractUnixSocketOfTheHostIsUnreachable) {
    // Abstract unix sockets belong to a network namespace, not to a path the mounts could hide.
    const auto out = sandbox().probe({"unix-abstract", world().abstract_name});
    EXPECT_EQ(out.get("outcome"), "refused") << out.raw;
    EXPECT_EQ(world().abstract_trap.arrivals(), 0);
    expect_control_reachable();
}

TEST_F(EgressBattery, PathnameUnixSocketOfTheHostIsUnreachable) {
    const auto out = sandbox().probe({"unix", world().socket_path.string()});
    EXPECT_EQ(out.get("outcome"), "refused") << out.raw;
    EXPECT_EQ(world().path_trap.arrivals(), 0);
    expect_control_reachable();
}

}  // namespace
}  // namespace maf_sandbox::egress_testing
