// The test network itself: its hosts answer from the test's namespace (where the egress proxy
// runs) and vanish, links and all, when the network is destroyed. Without this a refusal in the
// battery could be a dead test host.
#include <arpa/inet.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include <fmt/format.h>

#include "maf_sandbox/runtime/kernel/unique_fd.hpp"
#include "test_network.hpp"

namespace maf_sandbox::egress_testing {
namespace {

// One plain HTTP GET from the test's own namespace; returns the whole reply ("" on failure).
std::string get_from(const std::string& address, std::uint16_t port, int family) {
    runtime::UniqueFd fd(::socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_storage storage{};
    socklen_t size = 0;
    if (family == AF_INET) {
        auto* v4 = reinterpret_cast<sockaddr_in*>(&storage);
        v4->sin_family = AF_INET;
        v4->sin_port = htons(port);
        ::inet_pton(AF_INET, address.c_str(), &v4->sin_addr);
        size = sizeof *v4;
    } else {
        auto* v6 = reinterpret_cast<sockaddr_in6*>(&storage);
        v6->sin6_family = AF_INET6;
        v6->sin6_port = htons(port);
        ::inet_pton(AF_INET6, address.c_str(), &v6->sin6_addr);
        size = sizeof *v6;
    }
    timeval timeout{3, 0};
    ::setsockopt(fd.get(), SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
    if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&storage), size) != 0) {
        return {};
    }
    const std::string request =
        "GET /hello HTTP/1.1\r\nHost: allowed.test\r\nConnection: close\r\n\r\n";
    ::send(fd.get(), request.data(), request.size(), MSG_NOSIGNAL);
    std::string reply;
    char buffer[4096];
    ssize_t n = 0;
    while ((n = ::recv(fd.get(), buffer, sizeof buffer, 0)) > 0) {
        reply.append(buffer, static_cast<std::size_t>(n));
    }
    return reply;
}

TEST(EgressTestNetwork, BothHostsAnswerOverIpv4AndIpv6AndCountWhatArrives) {
    TestNetwork network;
    for (TestHost* host : {&network.allowed_host(), &network.denied_host()}) {
        const HostTraffic before = host->traffic();
        const auto v4 = get_from(host->addresses().host_ipv4, kHttpPort, AF_INET);
        EXPECT_NE(v4.find("served-by=" + host->label()), std::string::npos) << v4;
        const auto v6 = get_from(host->addresses().host_ipv6, kAltHttpPort, AF_INET6);
        EXPECT_NE(v6.find("served-by=" + host->label()), std::string::npos) << v6;
        const HostTraffic after = host->traffic();
        EXPECT_EQ(after.tcp_connections, before.tcp_connections + 2);
        EXPECT_EQ(after.http_requests, before.http_requests + 2);
    }
}

TEST(EgressTestNetwork, DestroyingTheNetworkRemovesItsLinks) {
    // By index, not name: another process may claim the freed slot (and its link names) at once.
    unsigned index = 0;
    std::filesystem::path hosts_file;
    {
        TestNetwork network;
        index = ::if_nametoindex(fmt::format("mafeg{}a", network.slot()).c_str());
        EXPECT_NE(index, 0u);
        hosts_file = network.hosts_file();
        EXPECT_TRUE(std::filesystem::exists(hosts_file));
    }
    char name[IF_NAMESIZE] = {};
    EXPECT_EQ(::if_indextoname(index, name), nullptr) << name << " outlived its test network";
    EXPECT_FALSE(std::filesystem::exists(hosts_file));
}

TEST(EgressTestNetwork, TwoNetworksAtOnceTakeDifferentSlots) {
    TestNetwork first;
    TestNetwork second;
    EXPECT_NE(first.slot(), second.slot());
    EXPECT_NE(first.allowed_host().addresses().host_ipv4,
              second.allowed_host().addresses().host_ipv4);
}

}  // namespace
}  // namespace maf_sandbox::egress_testing
