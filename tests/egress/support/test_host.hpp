// A test host: its own network namespace joined to the test's namespace by a veth pair, serving
// HTTP (80 and 8080), HTTPS (443), DNS (53, UDP and TCP) and a UDP echo (9999) on IPv4 and IPv6,
// and counting every connection and datagram that reaches it. Counting at the socket is what lets
// a bypass test say "nothing arrived", which is stronger than "the client saw an error".
//
// Every HTTP(S) answer names the host that served it (`served-by=<label>` in the body and an
// `x-served-by` header), so a test can tell which host a request really reached. Paths:
//   /redirect/<name>      302 to http://<name>/
//   /redirect-tls/<name>  302 to https://<name>/
//   anything else         200 with served-by, the Host header, the method, the target and the SNI
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "maf_sandbox/net/tls.hpp"
#include "test_netns.hpp"

namespace maf_sandbox::egress_testing {

inline constexpr std::uint16_t kHttpPort = 80;
inline constexpr std::uint16_t kHttpsPort = 443;
inline constexpr std::uint16_t kAltHttpPort = 8080;
inline constexpr std::uint16_t kDnsPort = 53;
inline constexpr std::uint16_t kUdpEchoPort = 9999;

// What reached a host so far. Compare a snapshot taken before a case with one taken after.
struct HostTraffic {
    int tcp_connections = 0;     // accepted on any TCP port
    int tls_handshakes = 0;      // completed on 443
    int http_requests = 0;       // request heads read, plain or TLS
    int udp_datagrams = 0;       // on any UDP port (DNS included)
    int silent_connections = 0;  // TCP connections that closed before sending a single byte

    bool operator==(const HostTraffic&) const = default;
    // Whether anything a client sent arrived since `before`: a connection that carried bytes, a
    // handshake, a request or a datagram. A connection opened and closed without a byte is not.
    bool received_bytes_since(const HostTraffic& before) const {
        return tcp_connections - silent_connections !=
                   before.tcp_connections - before.silent_connections ||
               tls_handshakes != before.tls_handshakes || http_requests != before.http_requests ||
               udp_datagrams != before.udp_datagrams;
    }
};
std::string describe(const HostTraffic& traffic);

// Addressing of one host: the test's end and the host's end of the veth pair.
struct TestHostAddresses {
    std::string host_ipv4;   // the host's own address, "10.231.N.2"
    std::string host_ipv6;   // "fd31:a7c2:e9b0:N::2"
    std::string local_ipv4;  // the test's end, "10.231.N.1"
    std::string local_ipv6;
    int prefix_v4 = 24;
    int prefix_v6 = 64;

    // The addresses for subnet N (1..254) of the tests' private ranges 10.231.N.0/24 and
    // fd31:a7c2:e9b0:N::/64.
    static TestHostAddresses for_subnet(int subnet);
};

class TestHost {
  public:
    // `label` names the host in its answers ("A"); `link_name` is the test-side veth name (the
    // host-side end is link_name + "p"). Throws when the namespace, link or a listener cannot be
    // made; nothing is left behind.
    TestHost(std::string label, std::string link_name, TestHostAddresses addresses,
             const net::PemCredentials& tls);
    ~TestHost();  // stops the servers, then removes the link and the namespace
    TestHost(const TestHost&) = delete;
    TestHost& operator=(const TestHost&) = delete;

    const std::string& label() const noexcept;
    const TestHostAddresses& addresses() const noexcept;
    // The counters once every open connection has been served (waits up to two seconds, so a
    // connection still in flight when a case ends is counted fully).
    HostTraffic traffic() const;
    // Every request line and SNI seen, for failure messages.
    std::vector<std::string> log() const;

  private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace maf_sandbox::egress_testing
