// The egress tests' private network: host A (the allowed host) and host B (the denied host, also
// the target of redirects and relays), each in its own namespace behind a veth pair, one TLS
// authority whose certificate names every test name, and a hosts file mapping the names to the
// hosts for the egress proxy (MAF_SANDBOX_EGRESS_HOSTS_FILE).
//
// Several test processes may run at once (ctest runs each test as its own process), so each
// network claims a slot by binding an abstract unix socket "maf-egress-slot-<n>"; the slot picks
// the subnets 10.231.(2n+1).0/24 for A and 10.231.(2n+2).0/24 for B (and the matching
// fd31:a7c2:e9b0::/48 subnets) and the link names. The kernel releases the slot when the process
// dies; no other address is ever touched.
//
// Names in the hosts file:
//   A: allowed.test  api.wild.test  wild.test  notwild.test  alt.test  ported.test
//   B: denied.test  other.test  allowed.test.denied.test
//   loopback.test -> 127.0.0.1, metadata.test -> 169.254.169.254, private.test -> A's address
#pragma once

#include <filesystem>
#include <memory>
#include <string>

#include "maf_sandbox/runtime/kernel/unique_fd.hpp"
#include "test_host.hpp"

namespace maf_sandbox::egress_testing {

class TestNetwork {
  public:
    // Throws when no slot is free or a host cannot be built; nothing is left behind.
    TestNetwork();
    ~TestNetwork();
    TestNetwork(const TestNetwork&) = delete;
    TestNetwork& operator=(const TestNetwork&) = delete;

    TestHost& allowed_host() { return *a_; }
    TestHost& denied_host() { return *b_; }
    const std::filesystem::path& hosts_file() const { return hosts_file_; }
    // PEM of the authority that signed both hosts' certificate (for the guest's trust).
    const std::string& ca_certificate_pem() const { return ca_pem_; }
    const std::filesystem::path& directory() const { return directory_; }
    int slot() const { return slot_; }

  private:
    int slot_ = -1;
    runtime::UniqueFd slot_lock_;
    std::filesystem::path directory_;
    std::filesystem::path hosts_file_;
    std::string ca_pem_;
    std::unique_ptr<TestHost> a_;
    std::unique_ptr<TestHost> b_;
};

}  // namespace maf_sandbox::egress_testing
