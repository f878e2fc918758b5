// Two endings the ACAS backend must report truthfully: a shell transfer whose deadline passes in a
// 429 Retry-After wait (nothing ran, so the staged file is taken back and the sandbox stays
// whole), and close(), which must see every client's close happen on its own io_context.
#include <gtest/gtest.h>

#include <atomic>
#include <boost/asio/executor_work_guard.hpp>
#include <chrono>
#include <filesystem>
#include <thread>

#include "harness.hpp"
#include "maf_sandbox/acas/backend.hpp"
#include "maf_sandbox/acas/errors.hpp"

namespace maf_sandbox::acas {
namespace {

using maf_sandbox::testing::drive;
namespace asio = boost::asio;
namespace fs = std::filesystem;

// The names in `dir` that are staged files of a shell transfer.
std::vector<std::string> staged_files(const fs::path& dir) {
    std::vector<std::string> names;
    for (const auto& entry : fs::directory_iterator(dir)) {
        const auto name = entry.path().filename().string();
        if (name.starts_with(".maf-") && name.ends_with(".part"))
            names.push_back(name);
    }
    return names;
}

// Throttles the `nth` exec POST from now on (1-based) with a Retry-After beyond any deadline.
void throttle_exec(testing::FakeAcasService& service, int nth) {
    auto seen = std::make_shared<std::atomic<int>>(0);
    service.set_fault([seen, nth](const net::HttpRequest& request,
                                  const std::string& path) -> std::optional<net::HttpResponse> {
        if (request.method != "POST" || path.find("/executeShellCommand") == std::string::npos)
            return std::nullopt;
        if (++*seen != nth)
            return std::nullopt;
        net::HttpResponse r;
        r.status = 429;
        r.headers.set("Retry-After", "3600");
        return r;
    });
}

TEST(AcasShellTransfer, ADeadlineInARetryAfterWaitTakesTheStagedFileBackAndIsATimeout) {
    Harness h;
    auto backend = h.backend();
    auto sandbox = drive(h.io, backend->acquire(kKey, h.spec()));
    const auto id = *backend->held_sandbox_id(kKey, "shell");
    const fs::path base = h.work.path() / "work";
    // The transfer's commands: stage (1), append the one chunk (2), move (3). The append is
    // throttled past the deadline after the staged file exists; the take-back (rm) then runs.
    throttle_exec(h.service, 2);
    bool timed_out = false;
    try {
        drive(h.io, sandbox->write_file("out.txt", "payload", ""));
    } catch (const SandboxShellTransferUnfinished& e) {
        FAIL() << "a request that never ran left the sandbox whole, yet it was reported as "
                  "unfinished: "
               << e.what();
    } catch (const Timeout& e) {
        timed_out = true;
        EXPECT_EQ(e.type_name(), "AcasThrottled");
    }
    EXPECT_TRUE(timed_out);
    EXPECT_TRUE(staged_files(base).empty()) << "the staged sibling was taken back";
    EXPECT_FALSE(fs::exists(base / "out.txt"));
    // Whole: the same sandbox is still held and serves the next call.
    h.service.set_fault({});
    EXPECT_EQ(*backend->held_sandbox_id(kKey, "shell"), id);
    EXPECT_TRUE(h.service.sandbox(id));
    drive(h.io, sandbox->write_file("out.txt", "payload", ""));
    ExecRequest cat;
    cat.command = Argv{"cat", "out.txt"};
    EXPECT_EQ(drive(h.io, sandbox->exec(cat)).stdout_bytes, "payload");
}

TEST(AcasShellTransfer, AThrottledFirstCommandStagedNothingAndIsATimeoutToo) {
    Harness h;
    auto backend = h.backend();
    auto sandbox = drive(h.io, backend->acquire(kKey, h.spec()));
    const fs::path base = h.work.path() / "work";
    throttle_exec(h.service, 1);
    EXPECT_THROW(drive(h.io, sandbox->write_file("first.txt", "x", "")), AcasThrottled);
    EXPECT_TRUE(staged_files(base).empty());
    EXPECT_FALSE(fs::exists(base / "first.txt"));
}

TEST(AcasShellTransfer, AThrottledTakeBackIsUnfinishedBecauseTheStagedFileRemains) {
    Harness h;
    auto backend = h.backend();
    auto sandbox = drive(h.io, backend->acquire(kKey, h.spec()));
    const fs::path base = h.work.path() / "work";
    // Every exec after the staging one is throttled: the take-back cannot run either.
    auto seen = std::make_shared<std::atomic<int>>(0);
    h.service.set_fault([seen](const net::HttpRequest& request,
                               const std::string& path) -> std::optional<net::HttpResponse> {
        if (request.method != "POST" || path.find("/executeShellCommand") == std::string::npos ||
            ++*seen == 1)
            return std::nullopt;
        net::HttpResponse r;
        r.status = 429;
        r.headers.set("Retry-After", "3600");
        return r;
    });
    EXPECT_THROW(drive(h.io, sandbox->write_file("out.txt", "payload", "")),
                 SandboxShellTransferUnfinished);
    EXPECT_EQ(staged_files(base).size(), 1u);
}

TEST(AcasBackendClose, AClientWhoseIoContextNoLongerRunsIsACloseErrorNotASilentPost) {
    Harness h;
    auto backend = h.backend([](auto& c) { c.client_close = Seconds{0.3}; });
    auto sandbox = drive(h.io, backend->acquire(kKey, h.spec()));
    // A second io_context gets a client of its own, then stops running.
    asio::io_context other;
    ExecRequest request;
    request.command = std::string("true");
    EXPECT_EQ(drive(other, sandbox->exec(request)).exit_code, 0);
    const auto started = std::chrono::steady_clock::now();
    try {
        drive(h.io, backend->close());
        FAIL() << "close() returned although one client's close never ran";
    } catch (const AcasClientCloseError& e) {
        const std::string text = e.what();
        EXPECT_NE(text.find("were not closed within client_close_seconds"), std::string::npos)
            << text;
        EXPECT_EQ(text.find("still running"), std::string::npos) << text;
    }
    EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::seconds(5));
    EXPECT_EQ(h.service.live_sandboxes(), 1u) << "close never touches a sandbox";
}

TEST(AcasBackendClose, WaitsForTheCloseOfAClientOnAnotherRunningIoContext) {
    Harness h;
    auto backend = h.backend([](auto& c) { c.client_close = Seconds{10}; });
    auto sandbox = drive(h.io, backend->acquire(kKey, h.spec()));
    asio::io_context other;
    ExecRequest request;
    request.command = std::string("true");
    EXPECT_EQ(drive(other, sandbox->exec(request)).exit_code, 0);
    // The other loop runs on its own thread while close() runs here.
    other.restart();
    auto guard = asio::make_work_guard(other);
    std::thread runner([&] { other.run(); });
    std::exception_ptr failure;
    try {
        drive(h.io, backend->close());
    } catch (...) {
        failure = std::current_exception();
    }
    guard.reset();
    other.stop();
    runner.join();
    EXPECT_FALSE(failure) << "both clients closed on their own loops";
    EXPECT_THROW(drive(h.io, backend->acquire(kKey, h.spec())), AcasBackendClosed);
}

}  // namespace
}  // namespace maf_sandbox::acas
