// The removal probe's image-level hint (README "Guest removal compatibility is checked at
// acquire"): a completed refusal refuses a cold acquire of the same image before any create for
// image_hint seconds from that probe; refusals served from the hint never extend it; after
// expiry the next cold acquire creates and probes again, so a repaired image recovers.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "harness.hpp"

namespace maf_sandbox::acas {
namespace {

using maf_sandbox::testing::drive;

// The guest's `rm` of the probe file fails as a non-root image's would beside root-owned files.
void refuse_guest_removal(testing::FakeAcasService& service,
                          std::shared_ptr<std::atomic<bool>> on) {
    service.set_fault([on](const net::HttpRequest& request,
                           const std::string& path) -> std::optional<net::HttpResponse> {
        if (*on && path.ends_with("/executeShellCommand") &&
            request.body.find("rm -- '/.maf-authority-") != std::string::npos) {
            net::HttpResponse response;
            response.headers.set("Content-Type", "application/json");
            response.body =
                R"({"stdout":"","stderr":"rm: cannot remove: Permission denied","exitCode":1})";
            return response;
        }
        return std::nullopt;
    });
}

TEST(AcasImageHint, ACompletedRefusalRefusesBeforeCreateUntilItExpiresThenTheImageRecovers) {
    Harness h;
    auto backend = h.backend([](auto& c) { c.image_hint = Seconds{1.0}; });
    auto broken = std::make_shared<std::atomic<bool>>(true);
    refuse_guest_removal(h.service, broken);
    // The probe completes with a refusal: files_out is withdrawn and the new sandbox disposed.
    EXPECT_THROW(drive(h.io, backend->acquire(kKey, h.spec())), SandboxCapabilityNotSupported);
    const auto probed = std::chrono::steady_clock::now();  // the hint was set just before
    EXPECT_EQ(h.service.count("PUT", "/sandboxes"), 1u);
    EXPECT_EQ(h.service.live_sandboxes(), 0u);

    // Within the hint: refused before any create, even once the image is repaired.
    std::this_thread::sleep_until(probed + std::chrono::milliseconds(300));
    *broken = false;
    EXPECT_THROW(drive(h.io, backend->acquire(kKey, h.spec())), SandboxCapabilityNotSupported);
    EXPECT_EQ(h.service.count("PUT", "/sandboxes"), 1u);

    // Past the probe's second, but under a second after the hint's last refusal: that refusal
    // did not extend it, so this cold acquire creates, probes the repaired image and succeeds.
    std::this_thread::sleep_until(probed + std::chrono::milliseconds(1050));
    auto sandbox = drive(h.io, backend->acquire(kKey, h.spec()));
    EXPECT_EQ(h.service.count("PUT", "/sandboxes"), 2u);
    EXPECT_EQ(h.service.live_sandboxes(), 1u);
}

TEST(AcasImageHint, RefusesOnlyWhatTheRefusalWithdrawsAndOnlyForThatImage) {
    Harness h;
    auto backend = h.backend();  // the README's 60 s
    auto broken = std::make_shared<std::atomic<bool>>(true);
    refuse_guest_removal(h.service, broken);
    EXPECT_THROW(drive(h.io, backend->acquire(kKey, h.spec())), SandboxCapabilityNotSupported);
    EXPECT_EQ(h.service.count("PUT", "/sandboxes"), 1u);
    *broken = false;

    // Another image is not covered by this image's hint.
    drive(h.io, backend->acquire(SandboxKey{"s", "t", "a", ""},
                                 h.spec([](auto& f) { f.image = "python-3.13"; })));
    EXPECT_EQ(h.service.count("PUT", "/sandboxes"), 2u);
    // An exec-only workload only warns about a removal refusal, so the hint does not refuse it.
    drive(h.io, backend->acquire(SandboxKey{"s2", "t2", "a", ""}, h.spec([](auto& f) {
        f.requires_capabilities = {Capability::exec};
    })));
    EXPECT_EQ(h.service.count("PUT", "/sandboxes"), 3u);
}

}  // namespace
}  // namespace maf_sandbox::acas
