// The protocol's EGRESS conformance suite against LocalBackend with allowlist egress, over the
// tests' own hosts (never an outside address): the allowed host answers, the denied one does not.
#include "maf_sandbox/core/conformance.hpp"

#include "egress_fixture.hpp"

namespace maf_sandbox::egress_testing {
namespace {

TEST(EgressConformance, LocalBackendDeclaresAllowlistAndPassesTheEgressSuite) {
    TestNetwork network;
    EgressSandbox sandbox(network, {"allowed.test"});
    const auto declarations = sandbox.backend().declarations();
    ASSERT_EQ(declarations.egress_modes.count(Egress::allowlist), 1u)
        << "LocalBackend does not declare allowlist egress on this host";

    PosixGuestSubject subject(sandbox.shared_sandbox(), "/maf-sandbox/work",
                              declarations.capabilities);
    const HostTraffic b_before = network.denied_host().traffic();
    const auto results = run_blocking(assert_egress_conformance(
        subject, EgressUrls{"http://allowed.test/conformance", "http://denied.test/conformance"}));
    ASSERT_EQ(results.size(), egress_probes().size());
    for (const auto& result : results) {
        EXPECT_EQ(result.status, ProbeStatus::passed) << result.name << ": " << result.detail;
    }
    EXPECT_EQ(network.denied_host().traffic(), b_before);
}

TEST(EgressConformance, DeclaredSuitesRunEgressWhenUrlsAreGiven) {
    TestNetwork network;
    EgressSandbox sandbox(network, {"allowed.test"});
    PosixGuestSubject subject(sandbox.shared_sandbox(), "/maf-sandbox/work",
                              sandbox.backend().declarations().capabilities);
    const auto results = run_blocking(run_declared_suites(
        subject, sandbox.backend().declarations(),
        EgressUrls{"http://allowed.test/conformance", "http://denied.test/conformance"}));
    int egress = 0;
    for (const auto& result : results) {
        if (result.suite == kEgressSuite) {
            ++egress;
            EXPECT_EQ(result.status, ProbeStatus::passed) << result.name << ": " << result.detail;
        }
    }
    EXPECT_EQ(egress, static_cast<int>(egress_probes().size()));
}

}  // namespace
}  // namespace maf_sandbox::egress_testing
