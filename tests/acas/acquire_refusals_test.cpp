// What the backend itself refuses or declares before any sandbox exists (README "Threat model",
// "The backend" and "EGRESS_METHODS"): against the real service it declares microvm, which the
// router's default floor admits; direct acquisition refuses method-scoped egress rules,
// unrestricted egress, capabilities it withholds and reserved labels, all before any request; an
// unreadable storage base fails acquire and disposes the new sandbox.
#include <gtest/gtest.h>

#include "harness.hpp"
#include "maf_sandbox/core/router.hpp"

namespace maf_sandbox::acas {
namespace {

using maf_sandbox::testing::drive;

TEST(AcasDeclarations, AgainstTheServiceItDeclaresMicrovmWhichTheDefaultRouterFloorAdmits) {
    AcasSandboxConfig config;
    config.endpoint = "https://management.westeurope.azuredevcompute.io";
    config.subscription_id = "sub";
    config.resource_group = "rg";
    config.sandbox_group = "grp";
    config.token = "unused";
    config.silence_preview_warning = true;
    auto backend = std::make_shared<AcasBackend>(config);
    EXPECT_EQ(backend->isolation(), Isolation::microvm);  // stated, never probed: no request
    EXPECT_NO_THROW(SandboxRouter({backend}));
}

TEST(AcasDirectAcquire, RefusesWhatItCannotEnforceBeforeAnyRequest) {
    Harness h;
    auto backend = h.backend();
    const auto refused = [&](std::function<void(SandboxSpecFields&)> tweak) {
        return drive(h.io, backend->acquire(kKey, h.spec(std::move(tweak))));
    };
    // A method-scoped rule: the service's method enforcement is unmeasured.
    EXPECT_THROW(refused([](auto& f) {
                     f.egress = Egress::allowlist;
                     f.egress_allow = {"GET pypi.org"};
                 }),
                 SandboxCapabilityNotSupported);
    EXPECT_THROW(refused([](auto& f) { f.egress = Egress::unrestricted; }),
                 SandboxEgressNotEnforced);
    for (const auto capability : {Capability::attached_identity, Capability::run_code,
                                  Capability::snapshot, Capability::reclaim}) {
        EXPECT_THROW(refused([&](auto& f) { f.requires_capabilities.insert(capability); }),
                     SandboxCapabilityNotSupported)
            << to_string(capability);
    }
    for (const std::string label : {"scope", "thread", "agent", "kind", "call", "acquire"}) {
        EXPECT_THROW(refused([&](auto& f) { f.labels[label] = "x"; }), InvalidArgument) << label;
    }
    EXPECT_THROW(drive(h.io, backend->acquire(SandboxKey{"s", "", "a", ""}, h.spec())),
                 InvalidArgument);  // no bound conversation
    EXPECT_EQ(h.service.requests(), 0u);
}

TEST(AcasDeclarations, TheConfigDefaultsAreTheReadmesFigures) {
    const AcasSandboxConfig c;
    EXPECT_EQ(c.max_clients_per_loop, 32u);
    EXPECT_EQ(c.client_wait.count(), 30.0);
    EXPECT_EQ(c.client_close.count(), 30.0);
    EXPECT_EQ(c.image_hint.count(), 60.0);  // the removal probe's image hint
    EXPECT_EQ(c.probe_timeout.count(), 30.0);
    EXPECT_EQ(c.auto_delete_seconds, 600);
}

TEST(AcasDirectAcquire, AnImageIdSkipsBothImageLookups) {
    Harness h;
    auto backend = h.backend();
    drive(h.io, backend->acquire(kKey, h.spec([](auto& f) {
        f.image.reset();
        f.image_id = "img-pinned";
    })));
    EXPECT_EQ(h.service.count("GET", "/diskimages"), 0u);
    EXPECT_EQ(h.service.count("GET", "/diskimages/public"), 0u);
    EXPECT_EQ(h.service.count("PUT", "/sandboxes"), 1u);
}

TEST(AcasDirectAcquire, AStorageBaseTheFilePlaneCannotStatFailsAcquireAndDisposesTheSandbox) {
    Harness h;
    const auto base = (h.work.path() / "work").string();
    h.service.set_fault([base](const net::HttpRequest& request,
                               const std::string& path) -> std::optional<net::HttpResponse> {
        if (path.ends_with("/files/stat") &&
            testing::percent_decode(request.target).find(base) != std::string::npos) {
            net::HttpResponse response;
            response.status = 400;
            response.headers.set("Content-Type", "application/problem+json");
            response.body = R"({"title":"PathNotReadable","status":400})";
            return response;
        }
        return std::nullopt;
    });
    auto backend = h.backend();
    EXPECT_THROW(drive(h.io, backend->acquire(kKey, h.spec())), AcasServiceError);
    EXPECT_EQ(h.service.count("PUT", "/sandboxes"), 1u);
    EXPECT_EQ(h.service.live_sandboxes(), 0u);
}

}  // namespace
}  // namespace maf_sandbox::acas
