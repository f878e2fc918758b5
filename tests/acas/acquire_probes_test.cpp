// Acquire-time probes (README "The backend" and "Guest removal compatibility is checked at
// acquire"): a missing tool or a failed host_tools check is SandboxCapabilityNotSupported and is
// retried by the next acquire; a failed capture probe disposes the sandbox; successful checks are
// cached with the sandbox; the removal probe's three verdicts decide FILES_OUT, HOST_TOOLS and
// FILES_DELETE, and an exec-only workload is only warned; the probe cleans up after itself.
#include <gtest/gtest.h>

#include <spdlog/sinks/ringbuffer_sink.h>
#include <spdlog/spdlog.h>
#include <algorithm>
#include <atomic>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <chrono>
#include <filesystem>
#include <thread>

#include "harness.hpp"
#include "maf_sandbox/core/shell_quote.hpp"

namespace maf_sandbox::acas {
namespace {

using maf_sandbox::testing::drive;
namespace fs = std::filesystem;

constexpr const char* kShProbe = "sh -c 'exit 0'";
constexpr const char* kHostToolsProbe = "|| exit 13";
constexpr const char* kRemovalProbe = "rm -- '/.maf-authority-";

net::HttpResponse exec_answer(int exit_code, const std::string& stderr_text = "") {
    net::HttpResponse response;
    response.headers.set("Content-Type", "application/json");
    response.body = boost::json::serialize(
        boost::json::object{{"stdout", ""}, {"stderr", stderr_text}, {"exitCode", exit_code}});
    return response;
}

// Answers the exec whose command contains `needle` with `exit_code`, running nothing, while `on`.
void answer_exec(
    testing::FakeAcasService& service, std::string needle, int exit_code,
    std::shared_ptr<std::atomic<bool>> on = std::make_shared<std::atomic<bool>>(true)) {
    service.set_fault(
        [needle, exit_code, on](const net::HttpRequest& request,
                                const std::string& path) -> std::optional<net::HttpResponse> {
            if (*on && path.ends_with("/executeShellCommand")) {
                const auto command = boost::json::parse(request.body).at("command").as_string();
                if (std::string_view(command).find(needle) != std::string_view::npos)
                    return exec_answer(exit_code, "probe answered by the test");
            }
            return std::nullopt;
        });
}

// The sh probe is a whole command of its own (the host_tools probe contains the same text).
std::size_t sh_probes(testing::FakeAcasService& service) {
    const auto commands = service.exec_commands();
    return static_cast<std::size_t>(std::count(commands.begin(), commands.end(), kShProbe));
}

std::size_t commands_containing(testing::FakeAcasService& service, const std::string& needle) {
    const auto commands = service.exec_commands();
    return static_cast<std::size_t>(std::count_if(commands.begin(), commands.end(), [&](auto& c) {
        return c.find(needle) != std::string::npos;
    }));
}

struct Logged {
    std::shared_ptr<spdlog::sinks::ringbuffer_sink_mt> sink =
        std::make_shared<spdlog::sinks::ringbuffer_sink_mt>(64);
    std::shared_ptr<spdlog::logger> log = std::make_shared<spdlog::logger>("acas-probes", sink);
    bool contains(const std::string& text) const {
        for (const auto& line : sink->last_formatted()) {
            if (line.find(text) != std::string::npos)
                return true;
        }
        return false;
    }
};

TEST(AcasAcquireProbes, AGuestWithoutAWorkingShIsRefusedDisposedAndTheNextAcquireRetries) {
    Harness h;
    auto backend = h.backend();
    auto on = std::make_shared<std::atomic<bool>>(true);
    answer_exec(h.service, kShProbe, 127, on);
    EXPECT_THROW(drive(h.io, backend->acquire(kKey, h.spec())), SandboxCapabilityNotSupported);
    EXPECT_EQ(h.service.live_sandboxes(), 0u);  // a fresh sandbox that failed its probe is gone
    *on = false;                                // the image is repaired: a failure was not cached
    drive(h.io, backend->acquire(kKey, h.spec()));
    EXPECT_EQ(h.service.count("PUT", "/sandboxes"), 2u);
    EXPECT_EQ(h.service.live_sandboxes(), 1u);
}

TEST(AcasAcquireProbes, ACaptureProbeReturningTheWrongBytesIsRefusedAndDisposesTheSandbox) {
    Harness h;
    auto backend = h.backend();
    // The capture probe runs `printf x` through the real capture script; this image prints y.
    h.service.set_rewrite([](std::string command) {
        const auto probe = shell_quote("printf x");
        if (const auto at = command.find(probe); at != std::string::npos)
            command.replace(at, probe.size(), shell_quote("printf y"));
        return command;
    });
    EXPECT_THROW(drive(h.io, backend->acquire(kKey, h.spec())), SandboxCapabilityNotSupported);
    EXPECT_EQ(h.service.count("PUT", "/sandboxes"), 1u);
    EXPECT_EQ(h.service.live_sandboxes(), 0u);
    EXPECT_FALSE(backend->held_sandbox_id(kKey, "shell"));
}

TEST(AcasAcquireProbes, AGuestMissingACaptureToolIsRefusedNamingThePrerequisites) {
    Harness h;
    auto backend = h.backend();
    // The capture script checks its tools first; an image without mkfifo fails that check.
    h.service.set_rewrite([](std::string command) {
        const std::string tools = "for t in sh mkdir mkfifo ";
        if (const auto at = command.find(tools); at != std::string::npos)
            command.replace(at, tools.size(), "for t in sh mkdir no-such-mkfifo ");
        return command;
    });
    try {
        drive(h.io, backend->acquire(kKey, h.spec()));
        FAIL() << "expected SandboxCapabilityNotSupported";
    } catch (const SandboxCapabilityNotSupported& e) {
        EXPECT_NE(std::string(e.what()).find("mkfifo"), std::string::npos) << e.what();
    }
    EXPECT_EQ(h.service.live_sandboxes(), 0u);
}

TEST(AcasAcquireProbes, SuccessfulChecksAreCachedWithTheSandboxForWarmReuse) {
    Harness h;
    auto backend = h.backend();
    const auto spec = h.spec([](auto& f) {
        f.requires_capabilities = {Capability::exec, Capability::files_out, Capability::host_tools};
    });
    drive(h.io, backend->acquire(kKey, spec));
    EXPECT_EQ(sh_probes(h.service), 1u);
    EXPECT_EQ(commands_containing(h.service, kHostToolsProbe), 1u);
    EXPECT_EQ(commands_containing(h.service, kRemovalProbe), 1u);
    drive(h.io, backend->acquire(kKey, spec));
    EXPECT_EQ(h.service.count("PUT", "/sandboxes"), 1u);
    EXPECT_EQ(sh_probes(h.service), 1u);
    EXPECT_EQ(commands_containing(h.service, kHostToolsProbe), 1u);
    EXPECT_EQ(commands_containing(h.service, kRemovalProbe), 1u);
    // A new sandbox (another key) runs its own checks.
    drive(h.io, backend->acquire(SandboxKey{"scope-2", "thread-2", "agent-1", ""}, spec));
    EXPECT_EQ(commands_containing(h.service, kRemovalProbe), 2u);
}

TEST(AcasAcquireProbes, AGuestWithoutNohupFailsTheHostToolsCheckWhichIsRetriedOnTheWarmSandbox) {
    Harness h;
    auto backend = h.backend();
    auto missing = std::make_shared<std::atomic<bool>>(true);
    // This image has no nohup: the host_tools probe's own nohup fails (exit 13).
    h.service.set_rewrite([missing](std::string command) {
        const std::string nohup = "nohup sh -c";
        if (const auto at = command.find(nohup); *missing && at != std::string::npos)
            command.replace(at, 5, "no-such-nohup");
        return command;
    });
    // The sandbox is warm already (an exec workload made it), so the failure keeps it.
    drive(h.io, backend->acquire(
                    kKey, h.spec([](auto& f) { f.requires_capabilities = {Capability::exec}; })));
    const auto host_tools = h.spec([](auto& f) {
        f.requires_capabilities = {Capability::exec, Capability::host_tools};
    });
    try {
        drive(h.io, backend->acquire(kKey, host_tools));
        FAIL() << "expected SandboxCapabilityNotSupported";
    } catch (const SandboxCapabilityNotSupported& e) {
        EXPECT_NE(std::string(e.what()).find("exit 13"), std::string::npos) << e.what();
    }
    EXPECT_EQ(h.service.live_sandboxes(), 1u);
    *missing = false;  // the failure was not cached: the next acquire checks again and passes
    drive(h.io, backend->acquire(kKey, host_tools));
    EXPECT_EQ(h.service.count("PUT", "/sandboxes"), 1u);
    EXPECT_EQ(commands_containing(h.service, kHostToolsProbe), 2u);
}

TEST(AcasAcquireProbes, AGuestWithoutMvFailsTheHostToolsCheck) {
    Harness h;
    auto backend = h.backend();
    // An mv that is missing answers 127, not the 1 a missing source gives: exit 12.
    h.service.set_rewrite([](std::string command) {
        const std::string mv = "mv -f ";
        if (const auto at = command.find(mv); at != std::string::npos)
            command.replace(at, 2, "no-such-mv");
        return command;
    });
    try {
        drive(h.io, backend->acquire(kKey, h.spec([](auto& f) {
            f.requires_capabilities = {Capability::exec, Capability::host_tools};
        })));
        FAIL() << "expected SandboxCapabilityNotSupported";
    } catch (const SandboxCapabilityNotSupported& e) {
        EXPECT_NE(std::string(e.what()).find("exit 12"), std::string::npos) << e.what();
    }
}

TEST(AcasAcquireProbes, ACompletedRemovalRefusalWithdrawsFilesOutAndHostToolsButOnlyWarnsExec) {
    Harness h;
    Logged logged;
    auto backend = h.backend([&](auto& c) { c.log = logged.log; });
    answer_exec(h.service, kRemovalProbe, 1);  // the file stays: the guest could not remove it
    for (const auto capability : {Capability::files_out, Capability::host_tools}) {
        EXPECT_THROW(
            drive(h.io, backend->acquire(SandboxKey{"s", "t", "a", ""}, h.spec([&](auto& f) {
                f.requires_capabilities = {capability};
            }))),
            SandboxCapabilityNotSupported)
            << to_string(capability);
    }
    EXPECT_EQ(h.service.live_sandboxes(), 0u);
    auto exec_only = drive(h.io, backend->acquire(kKey, h.spec([](auto& f) {
        f.requires_capabilities = {Capability::exec};
    })));
    EXPECT_TRUE(logged.contains("exec-only workloads continue"));
    ExecRequest request;
    request.command = std::string("printf ok");
    EXPECT_EQ(drive(h.io, exec_only->exec(request)).stdout_bytes, "ok");
}

TEST(AcasAcquireProbes, AnInconclusiveRemovalProbeServesFilesOutButNeverFilesDelete) {
    Harness h;
    auto backend = h.backend();
    // Exit 2 with the file still there is neither an observed removal nor a completed refusal.
    answer_exec(h.service, kRemovalProbe, 2);
    const auto files_out = h.spec([](auto& f) {
        f.requires_capabilities = {Capability::exec, Capability::files_out, Capability::host_tools};
    });
    drive(h.io, backend->acquire(kKey, files_out));
    EXPECT_EQ(h.service.live_sandboxes(), 1u);
    const auto files_delete = h.spec([](auto& f) {
        f.requires_capabilities = {Capability::exec, Capability::files_out,
                                   Capability::files_delete};
    });
    EXPECT_THROW(drive(h.io, backend->acquire(kKey, files_delete)), SandboxCapabilityNotSupported);
    // Warm: the sandbox keeps its verdict, it is not probed again and not disposed.
    EXPECT_EQ(commands_containing(h.service, kRemovalProbe), 1u);
    EXPECT_EQ(h.service.live_sandboxes(), 1u);
    // An inconclusive verdict sets no image hint: another key's cold acquire creates and probes.
    drive(h.io, backend->acquire(SandboxKey{"scope-2", "thread-2", "agent-1", ""}, files_out));
    EXPECT_EQ(h.service.count("PUT", "/sandboxes"), 2u);
}

TEST(AcasAcquireProbes, AnObservedRemovalServesFilesDelete) {
    Harness h;
    auto backend = h.backend();
    auto sandbox = drive(h.io, backend->acquire(kKey, h.spec([](auto& f) {
        f.requires_capabilities = {Capability::exec, Capability::files_in,
                                   Capability::files_delete};
    })));
    drive(h.io, sandbox->write_file("gone.txt", "x", ""));
    drive(h.io, sandbox->remove("gone.txt", "", false));
    EXPECT_FALSE(drive(h.io, sandbox->stat_file("gone.txt", "")));
}

TEST(AcasAcquireProbes, TheRemovalProbeLivesAtTheGuestRootAndIsCleanedUpThroughTheFilePlane) {
    Harness h;
    auto backend = h.backend();
    drive(h.io, backend->acquire(kKey, h.spec()));
    ASSERT_EQ(commands_containing(h.service, kRemovalProbe), 1u);
    // Planted by the file plane under a fresh directory at the guest's root...
    EXPECT_GE(h.service.count("PUT", "/files"), 1u);
    // ...removed by the guest's rm, and its directory by the file plane afterwards.
    EXPECT_EQ(h.service.count("DELETE", "/files"), 1u);
    EXPECT_TRUE(h.service.probe_leftovers().empty());
}

TEST(AcasAcquireProbes, AFailedProbeCleansUpItsDirectoryAndIsRetriedByTheNextAcquire) {
    Harness h;
    auto backend = h.backend();
    auto failing = std::make_shared<std::atomic<bool>>(true);
    // The probe's rm is answered with a service refusal: the probe fails, it reaches no verdict.
    h.service.set_fault([failing](const net::HttpRequest& request,
                                  const std::string& path) -> std::optional<net::HttpResponse> {
        if (*failing && path.ends_with("/executeShellCommand") &&
            request.body.find(kRemovalProbe) != std::string::npos) {
            net::HttpResponse response;
            response.status = 400;
            response.headers.set("Content-Type", "application/problem+json");
            response.body = R"({"title":"BadCommand","status":400})";
            return response;
        }
        return std::nullopt;
    });
    EXPECT_ANY_THROW(drive(h.io, backend->acquire(kKey, h.spec())));
    EXPECT_EQ(h.service.count("DELETE", "/files"), 1u);
    EXPECT_TRUE(h.service.probe_leftovers().empty());
    EXPECT_EQ(h.service.live_sandboxes(), 0u);
    // A transient failure is not a verdict: no hint was recorded, the next acquire probes again.
    *failing = false;
    drive(h.io, backend->acquire(kKey, h.spec()));
    EXPECT_EQ(h.service.count("PUT", "/sandboxes"), 2u);
    EXPECT_EQ(commands_containing(h.service, kRemovalProbe), 2u);
}

TEST(AcasAcquireProbes, AGuestThatRemovesTheProbesDirectoryTooHasNotShownAnObservedRemoval) {
    Harness h;
    auto backend = h.backend();
    // This image's rm takes the whole directory: the file is gone but so is its directory.
    h.service.set_rewrite([](std::string command) {
        if (command.find(kRemovalProbe) == 0) {
            command.replace(0, 6, "rm -rf -- ");
            command.replace(command.find("/probe'"), 7, "'");
        }
        return command;
    });
    EXPECT_THROW(drive(h.io, backend->acquire(kKey, h.spec([](auto& f) {
                     f.requires_capabilities = {Capability::exec, Capability::files_delete};
                 }))),
                 SandboxCapabilityNotSupported);
    // Inconclusive, not a refusal: files_out is still served.
    drive(h.io, backend->acquire(SandboxKey{"scope-2", "thread-2", "agent-1", ""}, h.spec()));
    EXPECT_TRUE(h.service.probe_leftovers().empty());
}

TEST(AcasAcquireProbes, ACancelledProbeStillRemovesItsDirectoryAndTheNewSandbox) {
    Harness h;
    auto backend = h.backend();
    auto in_probe = std::make_shared<std::atomic<bool>>(false);
    // The guest's rm of the probe is slow enough to cancel the acquire while it runs.
    h.service.set_fault([in_probe](const net::HttpRequest& request,
                                   const std::string& path) -> std::optional<net::HttpResponse> {
        if (path.ends_with("/executeShellCommand") &&
            request.body.find(kRemovalProbe) != std::string::npos) {
            *in_probe = true;
            std::this_thread::sleep_for(std::chrono::milliseconds(300));
        }
        return std::nullopt;
    });
    auto race = [&]() -> Task<void> {
        using namespace boost::asio::experimental::awaitable_operators;
        auto cancel_in_probe = [&]() -> Task<void> {
            boost::asio::steady_timer timer(co_await boost::asio::this_coro::executor);
            for (int waited = 0; !*in_probe && waited < 2000; ++waited) {  // at most 10 s
                timer.expires_after(std::chrono::milliseconds(5));
                co_await timer.async_wait(boost::asio::use_awaitable);
            }
        };
        co_await (backend->acquire(kKey, h.spec()) || cancel_in_probe());
    };
    drive(h.io, race());
    ASSERT_TRUE(*in_probe);
    EXPECT_TRUE(h.service.probe_leftovers().empty());
    EXPECT_EQ(h.service.live_sandboxes(), 0u);
}

}  // namespace
}  // namespace maf_sandbox::acas
