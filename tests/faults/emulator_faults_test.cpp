// Faults through the emulator (issue 8): AcasBackend against a real acas-emulator process while
// the emulator injects 429 storms, 5xx bursts, latency, connections dropped mid-response and an
// RBAC window. Each case proves three things: every operation finishes or fails with one of the
// project's typed errors (never a bare exception), none runs past its deadline, and afterwards,
// with the faults switched off through the emulator's admin route, the group holds no sandbox.
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <chrono>
#include <iostream>
#include <optional>
#include <string>

#include "fault_rig.hpp"
#include "maf_sandbox/acas/backend.hpp"
#include "maf_sandbox/core/errors.hpp"
#include "maf_sandbox/core/run_blocking.hpp"

namespace maf_sandbox::emulator::testing {
namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

// Added to a deadline before "hung past it" is declared: scheduling on a loaded 2-core machine.
constexpr auto kSlack = 3s;

double seconds_since(Clock::time_point start) {
    return std::chrono::duration<double>(Clock::now() - start).count();
}

// Runs `task` on `io` until the io_context has no work left, and returns how it ended and when:
// the time is taken when the task itself completes, not when the background work it left (a
// disposal the backend runs after reporting a timeout) finishes.
struct Timed {
    std::exception_ptr failure;
    double seconds = -1;
};

Timed run_timed(boost::asio::io_context& io, Task<void> task) {
    const auto start = Clock::now();
    Timed timed;
    boost::asio::co_spawn(io, std::move(task), [&](std::exception_ptr e) {
        timed.failure = e;
        timed.seconds = seconds_since(start);
    });
    io.restart();
    io.run();
    return timed;
}

// The group's sandboxes, "id (State)" each (faults must be off).
std::vector<std::string> listed(FaultRig& rig) {
    std::vector<std::string> ids;
    for (const auto& s : rig.sandboxes()) {
        ids.emplace_back(std::string(s.at("id").as_string()) + " (" +
                         std::string(s.at("state").as_string()) + ")");
    }
    return ids;
}

// Faults off, then the host's cleanup (dispose of the key, retrying what the backend kept for
// retry) must leave the group empty: no sandbox leaked.
void expect_nothing_leaked(FaultRig& rig, acas::AcasBackend& backend,
                           const std::vector<SandboxKey>& keys) {
    rig.clear_faults();
    for (const auto& key : keys) {
        const auto failure = run_blocking(rig.io(), backend.dispose(key, std::nullopt));
        EXPECT_FALSE(failure.has_value()) << "dispose after the faults: " << failure->detail;
    }
    EXPECT_TRUE(listed(rig).empty())
        << "leaked: " << fmt::format("{}", fmt::join(listed(rig), ", "));
}

SandboxSpec shell_spec() {
    SandboxSpecFields f;
    f.kind = "shell";
    f.image = "host";
    f.requires_capabilities = {Capability::exec, Capability::files_in, Capability::files_out};
    return SandboxSpec(f);
}

// What one pass of acquire, exec, write, read and dispose came to.
struct Outcome {
    bool finished = false;     // every step succeeded
    std::string failure;       // the typed error that ended it: "Type: message"
    double longest_over = -1;  // the worst (elapsed - deadline) of any step, seconds
};

// Runs `step`, records how long it took against `deadline`, and turns a failure into the
// outcome. Returns false when the step failed. Any exception outside the Error hierarchy fails
// the test: a caller could not handle it.
template <typename F>
bool step(boost::asio::io_context& io, Outcome& outcome, Seconds deadline, const char* name,
          F&& make_task) {
    bool ok = false;
    const auto timed = run_timed(io, make_task());
    try {
        if (timed.failure) {
            std::rethrow_exception(timed.failure);
        }
        ok = true;
    } catch (const Error& e) {
        EXPECT_FALSE(std::string(e.what()).empty()) << name << " failed without a message";
        outcome.failure = fmt::format("{} in {}: {}", e.type_name(), name, e.what());
    } catch (const std::exception& e) {
        ADD_FAILURE() << name << " failed with an untyped exception: " << e.what();
        outcome.failure = e.what();
    }
    const double over = timed.seconds - deadline.count();
    outcome.longest_over = std::max(outcome.longest_over, over);
    EXPECT_LT(over, std::chrono::duration<double>(kSlack).count())
        << name << " ran " << over << " s past its " << deadline.count() << " s deadline";
    return ok;
}

// acquire -> exec -> write -> read -> dispose, each bounded by the deadline the backend was
// given for it.
Outcome scenario(FaultRig& rig, acas::AcasBackend& backend, const SandboxKey& key) {
    const auto config = rig.config();
    auto& io = rig.io();
    Outcome outcome;
    std::shared_ptr<Sandbox> sandbox;
    // Acquire: create and wait (create_timeout), then probes (probe_timeout), plus listings and
    // the orphan cleanup of a failed create (client_wait, delete_timeout).
    const Seconds acquire_bound =
        config.create_timeout + config.probe_timeout + config.client_wait + config.delete_timeout;
    if (!step(io, outcome, acquire_bound, "acquire", [&]() -> Task<void> {
            auto spec = shell_spec();
            sandbox = co_await backend.acquire(key, spec);
        })) {
        return outcome;
    }
    ExecRequest exec;
    exec.command = std::string("echo fault-ok");
    exec.timeout = Seconds{10.0};
    if (!step(io, outcome, exec.timeout, "exec", [&]() -> Task<void> {
            const auto result = co_await sandbox->exec(exec);
            EXPECT_EQ(result.stdout_bytes, "fault-ok\n");
            EXPECT_EQ(result.exit_code, 0);
        })) {
        return outcome;
    }
    if (!step(io, outcome, config.read_timeout, "write_file", [&]() -> Task<void> {
            std::string path = "note.txt", content = "through faults", cwd;
            co_await sandbox->write_file(path, content, cwd);
        })) {
        return outcome;
    }
    if (!step(io, outcome, config.read_timeout, "read_file", [&]() -> Task<void> {
            std::string path = "note.txt", cwd;
            const auto bytes = co_await sandbox->read_file(path, cwd, 1024);
            EXPECT_EQ(bytes, "through faults");
        })) {
        return outcome;
    }
    std::optional<DisposalFailure> disposal;
    step(io, outcome, config.client_wait + config.delete_timeout, "dispose", [&]() -> Task<void> {
        std::optional<std::string> every_kind;
        disposal = co_await backend.dispose(key, every_kind);
    });
    if (disposal) {
        outcome.failure = "dispose: " + disposal->detail;
        return outcome;
    }
    outcome.finished = outcome.failure.empty();
    return outcome;
}

// One line per pass in the test's output, so a log shows what each fault did.
void report(const SandboxKey& key, const Outcome& outcome) {
    std::cout << "[ outcome  ] " << key.thread_id << "/" << key.agent_dir << ": "
              << (outcome.finished ? std::string("finished") : outcome.failure) << std::endl;
}

SandboxKey key_for(const std::string& name, int i) {
    return SandboxKey{"faults", name, fmt::format("agent-{}", i), ""};
}

TEST(EmulatorFaultsBackend, A429StormIsWaitedOutEveryStepFinishesAndNothingLeaks) {
    FaultRig rig;
    acas::AcasBackend backend(rig.config());
    // 0.3: an idempotent request gives up after 12 answers in a row (0.3^12 is negligible).
    rig.set_faults({{"rate429", 0.3}, {"retryAfterMs", 20}});
    std::vector<SandboxKey> keys;
    for (int i = 0; i < 2; ++i) {
        keys.push_back(key_for("storm", i));
        const auto outcome = scenario(rig, backend, keys.back());
        report(keys.back(), outcome);
        // A 429 with Retry-After means nothing ran: every request may wait it out, exec included.
        EXPECT_TRUE(outcome.finished) << outcome.failure;
    }
    expect_nothing_leaked(rig, backend, keys);
}

TEST(EmulatorFaultsBackend, A5xxBurstFinishesOrFailsTypedInTimeAndNothingLeaks) {
    FaultRig rig;
    acas::AcasBackend backend(rig.config());
    rig.set_faults({{"rate5xx", 0.25}});
    std::vector<SandboxKey> keys;
    int finished = 0;
    for (int i = 0; i < 4; ++i) {
        keys.push_back(key_for("burst", i));
        const auto outcome = scenario(rig, backend, keys.back());
        report(keys.back(), outcome);
        finished += outcome.finished ? 1 : 0;
        if (!outcome.finished) {
            // A failure names what happened; an exec that got a 5xx is never re-sent.
            EXPECT_NE(outcome.failure, "");
        }
    }
    RecordProperty("finished", finished);
    expect_nothing_leaked(rig, backend, keys);
}

TEST(EmulatorFaultsBackend, AnOutageOfOnly5xxFailsTheAcquireWithTheStatusAndCreatesNothing) {
    FaultRig rig;
    acas::AcasBackend backend(rig.config());
    rig.set_faults({{"rate5xx", 1.0}});
    Outcome outcome;
    step(rig.io(), outcome, rig.config().client_wait, "acquire", [&]() -> Task<void> {
        auto key = key_for("outage", 0);
        auto spec = shell_spec();
        co_await backend.acquire(key, spec);
    });
    EXPECT_NE(outcome.failure.find("503"), std::string::npos) << outcome.failure;
    rig.clear_faults();
    EXPECT_TRUE(listed(rig).empty());
}

TEST(EmulatorFaultsBackend, AnExecAnswered503IsNeverResentAndItsSandboxIsDisposed) {
    FaultRig rig;
    acas::AcasBackend backend(rig.config());
    const auto key = key_for("exec503", 0);
    auto sandbox = run_blocking(rig.io(), backend.acquire(key, shell_spec()));
    const auto old_id = backend.held_sandbox_id(key, "shell").value_or("?");
    rig.set_faults({{"rate5xx", 1.0}, {"only", "POST /sandboxes/{id}/executeShellCommand"}});
    ExecRequest exec;
    exec.command = std::string("echo once >> /tmp/runs");
    exec.timeout = Seconds{10.0};
    Outcome outcome;
    step(rig.io(), outcome, exec.timeout, "exec",
         [&]() -> Task<void> { co_await sandbox->exec(exec); });
    EXPECT_NE(outcome.failure.find("AcasRequestOutcomeUnknown"), std::string::npos)
        << outcome.failure;
    // Whether it ran is unknown, so the backend disposed of the sandbox rather than reuse it.
    // What is left is its replacement, made before the deletion to carry the notice.
    rig.clear_faults();
    const auto left = listed(rig);
    ASSERT_EQ(left.size(), 1u) << fmt::format("{}", fmt::join(left, ", "));
    EXPECT_FALSE(left[0].starts_with(old_id)) << left[0];
    expect_nothing_leaked(rig, backend, {key});
}

TEST(EmulatorFaultsBackend, LatencyWithinTheDeadlinesIsOnlySlower) {
    FaultRig rig;
    acas::AcasBackend backend(rig.config());
    rig.set_faults({{"latencyMs", 100}});
    const auto key = key_for("latency", 0);
    const auto start = Clock::now();
    const auto outcome = scenario(rig, backend, key);
    EXPECT_TRUE(outcome.finished) << outcome.failure;
    EXPECT_GT(seconds_since(start), 0.5);  // the latency was really there
    expect_nothing_leaked(rig, backend, {key});
}

TEST(EmulatorFaultsBackend, LatencyPastAnExecDeadlineFailsWithTimeoutOnTime) {
    FaultRig rig;
    acas::AcasBackend backend(rig.config());
    const auto key = key_for("slow", 0);
    auto sandbox = run_blocking(rig.io(), backend.acquire(key, shell_spec()));
    // Only the exec is slow, so the disposal the backend starts after the timeout is not.
    rig.set_faults({{"latencyMs", 2500}, {"only", "POST /sandboxes/{id}/executeShellCommand"}});
    ExecRequest exec;
    exec.command = std::string("echo late");
    exec.timeout = Seconds{1.0};
    const auto timed = run_timed(rig.io(), [&]() -> Task<void> { co_await sandbox->exec(exec); }());
    ASSERT_TRUE(timed.failure);
    EXPECT_THROW(std::rethrow_exception(timed.failure), Timeout);
    // Reported on time; the backend disposes the sandbox in the background afterwards.
    EXPECT_LT(timed.seconds, 1.0 + 1.5);
    expect_nothing_leaked(rig, backend, {key});
}

TEST(EmulatorFaultsBackend, ConnectionsDroppedMidResponseFinishOrFailTypedAndNothingLeaks) {
    FaultRig rig;
    acas::AcasBackend backend(rig.config());
    rig.set_faults({{"dropRate", 0.2}});
    std::vector<SandboxKey> keys;
    for (int i = 0; i < 4; ++i) {
        keys.push_back(key_for("drop", i));
        report(keys.back(), scenario(rig, backend, keys.back()));
    }
    expect_nothing_leaked(rig, backend, keys);
}

TEST(EmulatorFaultsBackend, ADroppedCreateAnswerLeavesNoOrphanBehindAFailedAcquire) {
    FaultRig rig;
    acas::AcasBackend backend(rig.config());
    // Every create answer is cut: the create runs on the emulator but its answer never arrives.
    rig.set_faults({{"dropRate", 1.0}, {"only", "PUT /sandboxes"}});
    Outcome outcome;
    step(rig.io(), outcome, rig.config().create_timeout, "acquire", [&]() -> Task<void> {
        auto key = key_for("orphan", 0);
        auto spec = shell_spec();
        co_await backend.acquire(key, spec);
    });
    EXPECT_FALSE(outcome.failure.empty());
    report(key_for("orphan", 0), outcome);
    // The failed acquire found the sandbox its lost answer made (by its acquire nonce) and
    // deleted it: nothing is left even before the host's dispose.
    rig.clear_faults();
    EXPECT_TRUE(listed(rig).empty()) << fmt::format("{}", fmt::join(listed(rig), ", "));
    expect_nothing_leaked(rig, backend, {key_for("orphan", 0)});
}

TEST(EmulatorFaultsBackend, AnRbacWindowIsWaitedOutAndTheAcquireFinishes) {
    FaultRig rig;
    // Twelve attempts with backoff capped at 0.5 s span about 4 s: well past the window.
    auto config = rig.config();
    config.retry.max_backoff = Seconds{0.5};
    acas::AcasBackend backend(config);
    rig.set_faults({{"forbiddenMs", 1500}});
    const auto key = key_for("rbac", 0);
    const auto start = Clock::now();
    const auto outcome = scenario(rig, backend, key);
    EXPECT_TRUE(outcome.finished) << outcome.failure;
    EXPECT_GE(seconds_since(start), 1.5);
    expect_nothing_leaked(rig, backend, {key});
}

TEST(EmulatorFaultsBackend, AnRbacWindowLongerThanTheRetryWindowFailsAsAuthorization) {
    FaultRig rig;
    auto config = rig.config();
    config.retry.forbidden_window = Seconds{1.0};
    acas::AcasBackend backend(config);
    rig.set_faults({{"forbiddenMs", 60000}});
    const auto start = Clock::now();
    EXPECT_THROW(run_blocking(rig.io(), backend.acquire(key_for("denied", 0), shell_spec())),
                 acas::AcasAuthorizationError);
    EXPECT_LT(seconds_since(start), 1.0 + 2.0);
    rig.clear_faults();
    EXPECT_TRUE(listed(rig).empty());
}

}  // namespace
}  // namespace maf_sandbox::emulator::testing
