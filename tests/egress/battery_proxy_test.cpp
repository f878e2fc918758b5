// Bypasses aimed at the proxy itself: names it must not admit, requests that disagree with
// themselves (Host header, SNI), tunnels it must not reinterpret, ports and redirects, and
// addresses it must never connect to. Every HTTP-level refusal is a 403 with x-deny-reason, is
// logged with a reason, and leaves the hosts' counters unchanged; the allowed control follows.
#include <arpa/inet.h>

#include "battery_fixture.hpp"

namespace maf_sandbox::egress_testing {

// --- Controls: the allowlist admits what it names ------------------------------------------------

TEST_F(EgressBattery, AllowedHostIsReachableOverHttpAndTheDecisionIsLogged) {
    const auto out = sandbox().curl("http://allowed.test/hello");
    EXPECT_EQ(out.status, 200) << out.describe();
    EXPECT_TRUE(out.served_by("A")) << out.describe();
    const auto decision = await_decision(sandbox(), log_before_, "allowed.test", true);
    ASSERT_TRUE(decision.has_value()) << "the allowed request was not logged:\n"
                                      << describe_log(sandbox().decisions());
    EXPECT_EQ(decision->port, 80);
    EXPECT_EQ(decision->method, "GET");
    EXPECT_LE(decision->time, std::chrono::system_clock::now());
    expect_denied_host_untouched();
}

TEST_F(EgressBattery, AllowedHostIsReachableOverHttpsWithItsOwnSni) {
    const auto out = sandbox().curl("https://allowed.test/hello");
    EXPECT_EQ(out.status, 200) << out.describe();
    EXPECT_TRUE(out.contains("sni=allowed.test")) << out.describe();
    EXPECT_TRUE(out.served_by("A")) << out.describe();
    expect_denied_host_untouched();
}

TEST_F(EgressBattery, WildcardPortAndCaseVariantsOfAllowedEntriesAreAdmitted) {
    EXPECT_TRUE(sandbox().curl("http://api.wild.test/").served_by("A"));
    EXPECT_TRUE(sandbox().curl("http://ported.test:8080/").served_by("A"));
    EXPECT_TRUE(sandbox().curl("http://ALLOWED.Test/").served_by("A"));
    expect_denied_host_untouched();
}

TEST_F(EgressBattery, GuestEnvironmentNamesTheProxyInEveryCase) {
    const auto out = sandbox().shell(
        "printf '%s|%s|%s|%s\\n' \"$http_proxy\" \"$https_proxy\" \"$HTTP_PROXY\" "
        "\"$HTTPS_PROXY\"");
    EXPECT_EQ(out.stdout_bytes,
              "http://127.0.0.1:3128|http://127.0.0.1:3128|http://127.0.0.1:3128|"
              "http://127.0.0.1:3128\n");
}

// --- Names the allowlist does not hold -----------------------------------------------------------

TEST_F(EgressBattery, DeniedHostOverHttpIsRefused) {
    const auto out = sandbox().curl("http://denied.test/");
    expect_proxy_refusal(out);
    expect_no_host_touched();
    expect_denial_logged("denied.test");
    expect_control_reachable();
}

TEST_F(EgressBattery, ConnectToADeniedHostIsRefused) {
    const auto out =
        sandbox().probe({"tunnel-tls", "denied.test:443", "denied.test", "denied.test", "/"});
    EXPECT_EQ(out.get("connect-status"), "403") << out.raw;
    expect_proxy_refusal(out);
    expect_no_host_touched();
    expect_denial_logged("denied.test");
    expect_control_reachable();
}

TEST_F(EgressBattery, UnlistedNameOfTheAllowedHostsAddressIsRefused) {
    // alt.test resolves to the allowed host's address: the allowlist is by name, not address.
    const auto out = sandbox().curl("https://alt.test/");
    EXPECT_EQ(out.connect_status, 403) << out.describe();
    EXPECT_FALSE(out.deny_reason().empty()) << out.describe();
    expect_no_host_touched();
    expect_denial_logged("alt.test");
    expect_control_reachable();
}

TEST_F(EgressBattery, AllowedNameAsALabelOfADeniedNameIsRefused) {
    const auto out = sandbox().curl("http://allowed.test.denied.test/");
    expect_proxy_refusal(out);
    expect_no_host_touched();
    expect_denial_logged("allowed.test.denied.test");
    expect_control_reachable();
}

TEST_F(EgressBattery, WildcardAdmitsNeitherItsApexNorALookalikeSuffix) {
    // "*.wild.test" admits names strictly below wild.test; both of these resolve to the allowed
    // host, so only the name check stands between them and it.
    expect_proxy_refusal(sandbox().curl("http://wild.test/"));
    expect_proxy_refusal(sandbox().curl("http://notwild.test/"));
    expect_no_host_touched();
    expect_denial_logged("wild.test");
    expect_denial_logged("notwild.test");
    expect_control_reachable();
}

TEST_F(EgressBattery, CaseAndTrailingDotVariantsOfADeniedNameAreRefused) {
    expect_proxy_refusal(sandbox().curl("http://DENIED.Test./"));
    const auto tunnel = sandbox().probe({"tunnel-raw", "Denied.TEST.:443", "x"});
    EXPECT_EQ(tunnel.get("connect-status"), "403") << tunnel.raw;
    expect_no_host_touched();
    expect_denial_logged("denied.test.");
    expect_control_reachable();
}

TEST_F(EgressBattery, DuplicateHostHeadersAreRefused) {
    // Two Host headers let a proxy and an origin disagree about the destination.
    const auto out = to_proxy(
        "GET http://allowed.test/ HTTP/1.1\\r\\nHost: allowed.test\\r\\nHost: "
        "denied.test\\r\\n\\r\\n");
    expect_proxy_refusal(out);
    expect_no_host_touched();
    expect_any_denial_logged();
    expect_control_reachable();
}

TEST_F(EgressBattery, UserinfoNamingTheAllowedHostDoesNotAdmitTheDeniedHost) {
    const auto out = to_proxy(
        "GET http://allowed.test@denied.test/ HTTP/1.1\\r\\nHost: denied.test\\r\\n\\r\\n");
    EXPECT_FALSE(out.served_by("B")) << out.raw;
    expect_proxy_refusal(out);
    expect_no_host_touched();
    expect_any_denial_logged();
    expect_control_reachable();
}

TEST_F(EgressBattery, IpLiteralOfTheAllowedHostThroughTheProxyIsRefused) {
    const auto v4 = sandbox().curl("http://" + a().addresses().host_ipv4 + "/");
    expect_proxy_refusal(v4);
    in_addr address{};
    ::inet_pton(AF_INET, a().addresses().host_ipv4.c_str(), &address);
    const auto decimal = to_proxy(
        fmt::format("GET http://{0}/ HTTP/1.1\\r\\nHost: {0}\\r\\n\\r\\n", ntohl(address.s_addr)));
    expect_proxy_refusal(decimal);
    expect_no_host_touched();
    expect_denial_logged(a().addresses().host_ipv4);
    expect_control_reachable();
}

TEST_F(EgressBattery, Ipv6LiteralThroughTheProxyIsRefused) {
    const auto out = sandbox().curl("http://[" + a().addresses().host_ipv6 + "]/");
    expect_proxy_refusal(out);
    expect_no_host_touched();
    expect_any_denial_logged();
    expect_control_reachable();
}

// --- Requests that disagree with themselves ------------------------------------------------------

TEST_F(EgressBattery, HostHeaderNamingADeniedHostUnderAnAllowedUrlIsRefused) {
    const auto out =
        to_proxy("GET http://allowed.test/ HTTP/1.1\\r\\nHost: denied.test\\r\\n\\r\\n");
    EXPECT_FALSE(out.served_by("B")) << out.raw;
    expect_proxy_refusal(out);
    expect_no_host_touched();
    expect_any_denial_logged("host header");
    expect_control_reachable();
}

TEST_F(EgressBattery, OriginFormRequestWithADeniedHostHeaderIsRefused) {
    const auto out = to_proxy("GET / HTTP/1.1\\r\\nHost: denied.test\\r\\n\\r\\n");
    EXPECT_FALSE(out.served_by("B")) << out.raw;
    expect_proxy_refusal(out);
    expect_no_host_touched();
    expect_any_denial_logged();
    expect_control_reachable();
}

TEST_F(EgressBattery, SniNamingADeniedHostInAnAllowedTunnelIsRefused) {
    const auto out =
        sandbox().probe({"tunnel-tls", "allowed.test:443", "denied.test", "denied.test", "/"});
    EXPECT_EQ(out.get("connect-status"), "200") << "the tunnel did not open:\n" << out.raw;
    EXPECT_NE(out.get("outcome"), "tls-ok") << out.raw;
    EXPECT_FALSE(out.served_by("B")) << out.raw;
    expect_denied_host_untouched();
    expect_allowed_host_got_no_bytes();
    expect_any_denial_logged("sni");
    expect_control_reachable();
}

TEST_F(EgressBattery, MissingSniToANamedHostIsRefused) {
    const auto out = sandbox().probe({"tunnel-tls", "allowed.test:443", "-", "allowed.test", "/"});
    EXPECT_EQ(out.get("connect-status"), "200") << "the tunnel did not open:\n" << out.raw;
    EXPECT_NE(out.get("outcome"), "tls-ok") << out.raw;
    expect_denied_host_untouched();
    expect_allowed_host_got_no_bytes();
    expect_any_denial_logged("sni");
    expect_control_reachable();
}

TEST_F(EgressBattery, AllowedSniCannotOpenATunnelToADeniedHost) {
    const auto out =
        sandbox().probe({"tunnel-tls", "denied.test:443", "allowed.test", "allowed.test", "/"});
    EXPECT_EQ(out.get("connect-status"), "403") << out.raw;
    expect_no_host_touched();
    expect_denial_logged("denied.test");
    expect_control_reachable();
}

TEST_F(EgressBattery, DomainFrontingInsideAllowedTlsReachesOnlyTheAllowedHost) {
    // The proxy cannot read inside TLS, so a fronted Host header goes to whatever the tunnel's
    // name resolves to, on the host side: the allowed host itself. It never reaches the denied one.
    const auto out = sandbox().probe(
        {"tunnel-tls", "allowed.test:443", "allowed.test", "denied.test", "/fronted"});
    EXPECT_EQ(out.get("outcome"), "tls-ok") << out.raw;
    EXPECT_TRUE(out.served_by("A")) << out.raw;
    expect_denied_host_untouched();
}

// --- Tunnels the proxy must not reinterpret ------------------------------------------------------

TEST_F(EgressBattery, ConnectInsideAnAllowedTunnelNeverReachesTheDeniedHost) {
    const auto out = sandbox().probe({"tunnel-raw", "allowed.test:443",
                                      "CONNECT denied.test:443 HTTP/1.1\\r\\nHost: "
                                      "denied.test:443\\r\\n\\r\\n"});
    EXPECT_EQ(out.get("connect-status"), "200") << "the tunnel did not open:\n" << out.raw;
    EXPECT_FALSE(out.replied("HTTP/1.1 200")) << out.raw;
    EXPECT_FALSE(out.served_by("B")) << out.raw;
    expect_denied_host_untouched();
    expect_any_denial_logged();
    expect_control_reachable();
}

TEST_F(EgressBattery, AbsoluteUriToADeniedHostInsideAnAllowedTunnelNeverReachesIt) {
    const auto out =
        sandbox().probe({"tunnel-raw", "allowed.test:443",
                         "GET http://denied.test/ HTTP/1.1\\r\\nHost: denied.test\\r\\n\\r\\n"});
    EXPECT_EQ(out.get("connect-status"), "200") << "the tunnel did not open:\n" << out.raw;
    EXPECT_FALSE(out.served_by("B")) << out.raw;
    expect_denied_host_untouched();
    expect_any_denial_logged();
    expect_control_reachable();
}

TEST_F(EgressBattery, PipelinedRequestToADeniedHostAfterAnAllowedOneIsRefused) {
    // The allowed host keeps the connection alive, so a proxy that checked only the first request
    // of a connection would forward the second. It must refuse it (or close before reading it).
    const auto out = to_proxy(
        "GET http://allowed.test/first HTTP/1.1\\r\\nHost: allowed.test\\r\\n\\r\\n"
        "GET http://denied.test/second HTTP/1.1\\r\\nHost: denied.test\\r\\nConnection: "
        "close\\r\\n\\r\\n");
    EXPECT_TRUE(out.served_by("A")) << out.raw;
    EXPECT_FALSE(out.served_by("B")) << out.raw;
    EXPECT_FALSE(out.replied("target=http://denied.test/second") || out.replied("target=/second"))
        << "the second request was forwarded:\n"
        << out.raw;
    if (out.replied("HTTP/1.1 403")) {
        expect_denial_logged("denied.test");
    }
    expect_denied_host_untouched();
    expect_control_reachable();
}

// --- Ports and redirects -------------------------------------------------------------------------

TEST_F(EgressBattery, DeniedPortOnTheAllowedHostIsRefused) {
    const auto out = sandbox().curl("http://allowed.test:8080/");
    expect_proxy_refusal(out);
    const auto tunnel = sandbox().probe({"tunnel-raw", "allowed.test:8080", "x"});
    EXPECT_EQ(tunnel.get("connect-status"), "403") << tunnel.raw;
    expect_no_host_touched();
    expect_denial_logged("allowed.test");
    expect_control_reachable();
}

TEST_F(EgressBattery, EntryWithAPortDoesNotOpenTheDefaultPorts) {
    const auto out = sandbox().curl("http://ported.test/");
    expect_proxy_refusal(out);
    expect_no_host_touched();
    expect_denial_logged("ported.test");
    expect_control_reachable();
}

TEST_F(EgressBattery, RedirectFromTheAllowedHostToTheDeniedHostIsRefused) {
    const auto out = sandbox().curl("http://allowed.test/redirect/denied.test", {"-L"});
    EXPECT_TRUE(out.contains("302")) << out.describe();
    EXPECT_EQ(out.status, 403) << out.describe();
    EXPECT_FALSE(out.served_by("B")) << out.describe();
    expect_denied_host_untouched();
    expect_denial_logged("denied.test");
    expect_control_reachable();
}

TEST_F(EgressBattery, RedirectToTheDeniedHostOverHttpsIsRefused) {
    const auto out = sandbox().curl("https://allowed.test/redirect-tls/denied.test", {"-L"});
    EXPECT_NE(out.exit_code, 0) << out.describe();
    EXPECT_TRUE(out.contains("302")) << out.describe();
    EXPECT_EQ(out.connect_status, 403) << out.describe();
    EXPECT_FALSE(out.served_by("B")) << out.describe();
    expect_denied_host_untouched();
    expect_denial_logged("denied.test");
    expect_control_reachable();
}

// --- Addresses the proxy never connects to -------------------------------------------------------

TEST_F(EgressBattery, HostLoopbackThroughTheProxyIsRefused) {
    const auto port = world().loopback_trap.port();
    const auto literal = to_proxy(fmt::format(
        "GET http://127.0.0.1:{0}/ HTTP/1.1\\r\\nHost: 127.0.0.1:{0}\\r\\n\\r\\n", port));
    expect_proxy_refusal(literal);
    const auto name = to_proxy(fmt::format(
        "GET http://localhost:{0}/ HTTP/1.1\\r\\nHost: localhost:{0}\\r\\n\\r\\n", port));
    expect_proxy_refusal(name);
    const auto v6 = to_proxy(
        fmt::format("GET http://[::1]:{0}/ HTTP/1.1\\r\\nHost: [::1]:{0}\\r\\n\\r\\n", port));
    expect_proxy_refusal(v6);
    const auto tunnel = sandbox().probe({"tunnel-raw", fmt::format("127.0.0.1:{}", port), "x"});
    EXPECT_EQ(tunnel.get("connect-status"), "403") << tunnel.raw;
    EXPECT_EQ(world().loopback_trap.arrivals(), 0);
    expect_denial_logged("127.0.0.1");
    expect_control_reachable();
}

TEST_F(EgressBattery, MetadataAddressThroughTheProxyIsRefused) {
    const auto out = to_proxy(
        "GET http://169.254.169.254/latest/meta-data/ HTTP/1.1\\r\\nHost: "
        "169.254.169.254\\r\\n\\r\\n");
    expect_proxy_refusal(out);
    const auto tunnel = sandbox().probe({"tunnel-raw", "169.254.169.254:443", "x"});
    EXPECT_EQ(tunnel.get("connect-status"), "403") << tunnel.raw;
    expect_denial_logged("169.254.169.254");
    expect_control_reachable();
}

// --- The guest's own name resolution does not matter ---------------------------------------------

TEST_F(EgressBattery, GuestHostsFileSpoofingDoesNotRedirectTheProxy) {
    // A guest that is root in its namespace maps allowed.test to the denied host's address: in
    // /etc/hosts when the image lets it (this runtime's does not: /etc belongs to a user the
    // sandbox does not map), and always at the application level with curl --resolve, which is
    // the same claim made where the proxy can see it. The proxy resolves on the host side, so
    // the request still reaches the allowed host; a direct attempt at the address has no route.
    EgressSandbox root_guest(world().network, battery_allowlist(), {.root_inside = true});
    const std::string& spoofed = b().addresses().host_ipv4;
    const auto hosts = root_guest.exec(
        {"sh", "-c",
         "printf '%s allowed.test\\n' \"$0\" >> /etc/hosts && getent hosts allowed.test", spoofed});
    if (hosts.exit_code == 0) {
        EXPECT_NE(hosts.stdout_bytes.find(spoofed), std::string::npos) << hosts.stdout_bytes;
    } else {
        EXPECT_NE(hosts.stderr_bytes.find("denied"), std::string::npos) << hosts.stderr_bytes;
    }
    const std::vector<std::string> resolve{"--resolve", "allowed.test:80:" + spoofed, "--resolve",
                                           "allowed.test:443:" + spoofed};

    const auto proxied = root_guest.curl("http://allowed.test/spoofed", resolve);
    EXPECT_EQ(proxied.status, 200) << proxied.describe();
    EXPECT_TRUE(proxied.served_by("A")) << proxied.describe();
    const auto tls = root_guest.curl("https://allowed.test/spoofed", resolve);
    EXPECT_EQ(tls.status, 200) << tls.describe();
    EXPECT_TRUE(tls.served_by("A")) << tls.describe();
    auto direct_args = resolve;
    direct_args.insert(direct_args.end(), {"--noproxy", "*"});
    const auto direct = root_guest.curl("http://allowed.test/spoofed", direct_args);
    EXPECT_NE(direct.exit_code, 0) << direct.describe();
    EXPECT_FALSE(direct.served_by("B")) << direct.describe();
    expect_denied_host_untouched();
}

}  // namespace maf_sandbox::egress_testing
