// The removal probe's image-level hint (README "Guest removal compatibility is checked at
// acquire"): a completed refusal refuses a cold acquire of the same image before any create for
// image_hint seconds from that probe; refusals served from the hint never extend it; after
// expiry the next cold acquire creates and probes again, so a repaired image recovers. Nothing
// here sleeps to wait: expiry is found by acquiring until one is served, under a deadline.
#include <gtest/gtest.h>

#include <atomic>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <chrono>

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

// Acquires until one is served, pausing briefly between attempts; each refusal must come from
// the hint (nothing created). Returns when the acquire succeeded, or nullopt at the deadline.
Task<std::optional<std::chrono::steady_clock::time_point>> acquire_until_served(
    Harness& h, AcasBackend& backend, std::chrono::steady_clock::time_point deadline) {
    boost::asio::steady_timer pause(co_await boost::asio::this_coro::executor);
    while (std::chrono::steady_clock::now() < deadline) {
        try {
            co_await backend.acquire(kKey, h.spec());
            co_return std::chrono::steady_clock::now();
        } catch (const SandboxCapabilityNotSupported&) {
            EXPECT_EQ(h.service.count("PUT", "/sandboxes"), 1u);
        }
        pause.expires_after(std::chrono::milliseconds(20));
        co_await pause.async_wait(boost::asio::use_awaitable);
    }
    co_return std::nullopt;
}

TEST(AcasImageHint, ACompletedRefusalRefusesBeforeCreateUntilItExpiresThenTheImageRecovers) {
    Harness h;
    constexpr auto kHint = std::chrono::seconds(3);
    auto backend = h.backend([&](auto& c) { c.image_hint = Seconds{3.0}; });
    auto broken = std::make_shared<std::atomic<bool>>(true);
    refuse_guest_removal(h.service, broken);
    const auto before_probe = std::chrono::steady_clock::now();
    // The probe completes with a refusal: files_out is withdrawn and the new sandbox disposed.
    EXPECT_THROW(drive(h.io, backend->acquire(kKey, h.spec())), SandboxCapabilityNotSupported);
    EXPECT_EQ(h.service.count("PUT", "/sandboxes"), 1u);
    EXPECT_EQ(h.service.live_sandboxes(), 0u);

    // The image is repaired at once, but the hint still refuses before any create.
    *broken = false;
    EXPECT_THROW(drive(h.io, backend->acquire(kKey, h.spec())), SandboxCapabilityNotSupported);
    EXPECT_EQ(h.service.count("PUT", "/sandboxes"), 1u);

    // Acquiring every 20 ms: were a served refusal to extend the hint, none would ever succeed.
    // The first success comes once the probe's hint has run out, and it creates and probes anew.
    const auto served = drive(
        h.io, acquire_until_served(h, *backend, before_probe + kHint + std::chrono::seconds(30)));
    ASSERT_TRUE(served) << "the hint never expired while refusals kept arriving";
    EXPECT_GE(*served - before_probe, kHint);
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
