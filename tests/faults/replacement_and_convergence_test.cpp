// Issue 27 items 1 and 2 through a real acas-emulator: racing replicas of a cold key converge on
// one sandbox that holds every write; an exec answered 503 or whose reply is dropped discards the
// sandbox (the seed requires it: its outcome is unknown) and the key's next acquire says so; and
// idempotent requests ride out 5xx answers and dropped replies without touching the sandbox.
#include <spdlog/logger.h>
#include <spdlog/sinks/ostream_sink.h>
#include <sys/wait.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <memory>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "fault_rig.hpp"
#include "maf_sandbox/acas/backend.hpp"
#include "maf_sandbox/acas/errors.hpp"
#include "maf_sandbox/core/errors.hpp"
#include "maf_sandbox/core/run_blocking.hpp"
#include "maf_sandbox/core/shell_quote.hpp"

namespace maf_sandbox::emulator::testing {
namespace {

// The fault rig with the longer deadlines of racing replicas on a loaded machine.
class Rig : public FaultRig {
  public:
    acas::AcasSandboxConfig config() const {
        auto c = FaultRig::config();
        c.create_timeout = Seconds{60.0};
        c.delete_timeout = Seconds{20.0};
        c.resume_timeout = Seconds{30.0};
        c.probe_timeout = Seconds{30.0};
        c.read_timeout = Seconds{20.0};
        c.client_wait = Seconds{20.0};
        return c;
    }

    // The group's sandboxes that are not being deleted (faults must be off).
    std::vector<std::string> live() {
        std::vector<std::string> ids;
        for (const auto& s : sandboxes()) {
            if (s.at("state").as_string() != "Deleting") {
                ids.emplace_back(s.at("id").as_string());
            }
        }
        return ids;
    }
};

SandboxSpec shell_spec() {
    SandboxSpecFields f;
    f.kind = "shell";
    f.image = "host";
    f.requires_capabilities = {Capability::exec, Capability::files_in, Capability::files_out};
    return SandboxSpec(f);
}

// The id of the sandbox `backend` holds for the key (the shell kind).
std::string held_id(const acas::AcasBackend& backend, const SandboxKey& key) {
    return backend.held_sandbox_id(key, "shell").value_or("(none held)");
}

ExecResult run(boost::asio::io_context& io, Sandbox& sandbox, std::string command) {
    ExecRequest exec;
    exec.command = std::move(command);
    exec.timeout = Seconds{20.0};
    return run_blocking(io, sandbox.exec(exec));
}

TEST(AcasKeyConvergence, RacingReplicasOfAColdKeyEndWithOneSandboxHoldingEveryWrite) {
    Rig rig;
    constexpr int kReplicas = 4;
    // One log for every replica: it shows that the race really made duplicates.
    std::ostringstream log_text;
    auto config = rig.config();
    config.log = std::make_shared<spdlog::logger>(
        "race", std::make_shared<spdlog::sinks::ostream_sink_mt>(log_text));
    std::vector<std::unique_ptr<acas::AcasBackend>> replicas;
    for (int i = 0; i < kReplicas; ++i)
        replicas.push_back(std::make_unique<acas::AcasBackend>(config));
    for (int round = 0; round < 2; ++round) {
        const SandboxKey key{"race", fmt::format("thread-{}", round), "agent", ""};
        // Every replica lists the cold key before any create lands, then creates: the race the
        // service cannot serialise. Each then writes through the sandbox acquire gave it.
        std::vector<std::string> ids(kReplicas);
        std::vector<std::exception_ptr> failures(kReplicas);
        for (int i = 0; i < kReplicas; ++i) {
            boost::asio::co_spawn(
                rig.io(),
                [&, i]() -> Task<void> {
                    auto sandbox = co_await replicas[i]->acquire(key, shell_spec());
                    ids[i] = held_id(*replicas[i], key);
                    ExecRequest exec;
                    exec.command = fmt::format("echo replica-{} >> /tmp/writers", i);
                    exec.timeout = Seconds{20.0};
                    const auto result = co_await sandbox->exec(exec);
                    EXPECT_EQ(result.exit_code, 0);
                },
                [&, i](std::exception_ptr e) { failures[i] = e; });
        }
        rig.io().restart();
        rig.io().run();
        for (int i = 0; i < kReplicas; ++i) {
            if (failures[i]) {
                try {
                    std::rethrow_exception(failures[i]);
                } catch (const std::exception& e) {
                    FAIL() << "replica " << i << ": " << e.what();
                }
            }
        }
        EXPECT_EQ(std::set<std::string>(ids.begin(), ids.end()).size(), 1u)
            << "replicas were handed different sandboxes: "
            << fmt::format("{}", fmt::join(ids, " "));
        const auto live = rig.live();
        EXPECT_EQ(live, std::vector<std::string>{ids[0]})
            << fmt::format("{}", fmt::join(live, " "));
        auto sandbox = run_blocking(rig.io(), replicas[0]->acquire(key, shell_spec()));
        const auto writers = run(rig.io(), *sandbox, "sort /tmp/writers");
        std::string expected;
        for (int i = 0; i < kReplicas; ++i)
            expected += fmt::format("replica-{}\n", i);
        EXPECT_EQ(writers.stdout_bytes, expected) << "a write landed in a sandbox nobody sees";
        EXPECT_FALSE(run_blocking(rig.io(), replicas[0]->dispose(key, std::nullopt)).has_value());
    }
    // The replicas' lists all go out before any create answers, so each round made duplicates
    // that converged (without them this test would prove nothing).
    std::size_t lost = 0;
    for (auto at = log_text.str().find("lost the race"); at != std::string::npos;
         at = log_text.str().find("lost the race", at + 1)) {
        ++lost;
    }
    RecordProperty("duplicates_converged", static_cast<int>(lost));
    EXPECT_GT(lost, 0u) << "no replica ever lost a race: " << log_text.str();
}

// An exec that failed with `faults` on the exec route: its sandbox is discarded, the next acquire
// hands out a new one and says the old one (and what was written to it) is gone, once.
void expect_replacement_reported(const json::object& faults) {
    Rig rig;
    acas::AcasBackend backend(rig.config());
    const SandboxKey key{"replace", "thread", "agent", ""};
    auto first = run_blocking(rig.io(), backend.acquire(key, shell_spec()));
    const auto first_id = held_id(backend, key);
    EXPECT_FALSE(first->replaced().has_value());
    ASSERT_EQ(run(rig.io(), *first, "echo kept > /tmp/state").exit_code, 0);
    rig.set_faults(faults);
    EXPECT_THROW(run(rig.io(), *first, "echo once >> /tmp/runs"), acas::AcasRequestOutcomeUnknown);
    rig.set_faults({});
    // The failed handle itself refuses further work instead of pretending.
    EXPECT_THROW(run(rig.io(), *first, "true"), SandboxInvalidated);

    auto second = run_blocking(rig.io(), backend.acquire(key, shell_spec()));
    ASSERT_TRUE(second->replaced().has_value()) << "the blank sandbox was handed out silently";
    const auto second_id = held_id(backend, key);
    EXPECT_EQ(second->replaced()->previous_id, first_id);
    EXPECT_NE(second_id, first_id);
    EXPECT_NE(second->replaced()->reason.find("gone"), std::string::npos);
    // The report is true: what the first sandbox held is not in the second.
    EXPECT_NE(run(rig.io(), *second, "cat /tmp/state").exit_code, 0);
    EXPECT_EQ(rig.live(), std::vector<std::string>{second_id});

    auto third = run_blocking(rig.io(), backend.acquire(key, shell_spec()));
    EXPECT_FALSE(third->replaced().has_value()) << "one discard is reported once";
    EXPECT_EQ(held_id(backend, key), second_id);
    EXPECT_FALSE(run_blocking(rig.io(), backend.dispose(key, std::nullopt)).has_value());
}

TEST(AcasReplacement, AnExecAnswered503DiscardsTheSandboxAndTheNextAcquireReportsIt) {
    expect_replacement_reported(
        {{"rate5xx", 1.0}, {"only", "POST /sandboxes/{id}/executeShellCommand"}});
}

TEST(AcasReplacement, AnExecWhoseReplyIsDroppedDiscardsTheSandboxAndTheNextAcquireReportsIt) {
    expect_replacement_reported(
        {{"dropRate", 1.0}, {"only", "POST /sandboxes/{id}/executeShellCommand"}});
}

TEST(AcasReplacement, ADisposeTheCallerAskedForIsNotReportedAsAReplacement) {
    Rig rig;
    acas::AcasBackend backend(rig.config());
    const SandboxKey key{"replace", "disposed", "agent", ""};
    run_blocking(rig.io(), backend.acquire(key, shell_spec()));
    const auto first_id = held_id(backend, key);
    EXPECT_FALSE(run_blocking(rig.io(), backend.dispose(key, std::nullopt)).has_value());
    auto second = run_blocking(rig.io(), backend.acquire(key, shell_spec()));
    EXPECT_NE(held_id(backend, key), first_id);
    EXPECT_FALSE(second->replaced().has_value());
    EXPECT_FALSE(run_blocking(rig.io(), backend.dispose(key, std::nullopt)).has_value());
}

// GET (get, list) and DELETE are idempotent: on a 5xx or a reply cut mid-response they are sent
// again within the deadline, and the warm sandbox with its state survives. Each route is faulted
// on its own, 40% of the time (12 attempts make a run of failures negligible) (`fault` is rate5xx
// or dropRate): the exec route stays clean, since an exec is never re-sent.
void expect_idempotent_retries_keep_the_sandbox(const char* fault) {
    Rig rig;
    acas::AcasBackend backend(rig.config());
    const SandboxKey key{"retry", "thread", "agent", ""};
    auto first = run_blocking(rig.io(), backend.acquire(key, shell_spec()));
    ASSERT_EQ(run(rig.io(), *first, "echo kept > /tmp/state").exit_code, 0);
    // Another replica finds the key by listing (GET /sandboxes), then reads the sandbox (GET
    // /sandboxes/{id}) to resume it.
    for (const char* route : {"GET /sandboxes", "GET /sandboxes/{id}"}) {
        rig.set_faults({{fault, 0.4}, {"only", route}});
        acas::AcasBackend replica(rig.config());
        auto adopted = run_blocking(rig.io(), replica.acquire(key, shell_spec()));
        EXPECT_EQ(held_id(replica, key), held_id(backend, key)) << route;
        EXPECT_FALSE(adopted->replaced().has_value()) << route;
        EXPECT_EQ(run(rig.io(), *adopted, "cat /tmp/state").stdout_bytes, "kept\n") << route;
    }
    rig.set_faults({{fault, 0.4}, {"only", "DELETE /sandboxes/{id}"}});
    EXPECT_FALSE(run_blocking(rig.io(), backend.dispose(key, std::nullopt)).has_value());
    rig.set_faults({});
    EXPECT_TRUE(rig.live().empty());
}

TEST(AcasRetries, GetListAndDeleteRideOutA5xxOnFortyPercentOfRequests) {
    expect_idempotent_retries_keep_the_sandbox("rate5xx");
}

TEST(AcasRetries, GetListAndDeleteRideOutFortyPercentOfRepliesDropped) {
    expect_idempotent_retries_keep_the_sandbox("dropRate");
}

// The discarding process leaves the notice with the service itself: it lives on after that
// process (here: its backend object, which shares nothing with the next one but the service).
TEST(AcasReplacement, TheNoticeOutlivesTheProcessThatDiscardedTheSandbox) {
    Rig rig;
    const SandboxKey key{"replace", "across", "agent", ""};
    std::string first_id;
    {
        acas::AcasBackend first_process(rig.config());
        auto first = run_blocking(rig.io(), first_process.acquire(key, shell_spec()));
        first_id = held_id(first_process, key);
        ASSERT_EQ(run(rig.io(), *first, "echo kept > /tmp/state").exit_code, 0);
        rig.set_faults({{"dropRate", 1.0}, {"only", "POST /sandboxes/{id}/executeShellCommand"}});
        EXPECT_THROW(run(rig.io(), *first, "echo once >> /tmp/runs"),
                     acas::AcasRequestOutcomeUnknown);
        rig.set_faults({});
    }
    acas::AcasBackend second_process(rig.config());
    auto second = run_blocking(rig.io(), second_process.acquire(key, shell_spec()));
    ASSERT_TRUE(second->replaced().has_value())
        << "another process was handed the blank sandbox silently";
    EXPECT_EQ(second->replaced()->previous_id, first_id);
    EXPECT_NE(second->replaced()->reason.find("gone"), std::string::npos)
        << second->replaced()->reason;
    const auto second_id = held_id(second_process, key);
    EXPECT_NE(second_id, first_id);
    EXPECT_NE(run(rig.io(), *second, "cat /tmp/state").exit_code, 0) << "the report is true";
    // The notice is the service's, not the guest's: nothing of it is left in the sandbox.
    EXPECT_EQ(run(rig.io(), *second, "ls -A /tmp | grep -c maf-sandbox-replaced").stdout_bytes,
              "0\n");
    EXPECT_EQ(rig.live(), std::vector<std::string>{second_id});

    acas::AcasBackend third_process(rig.config());
    auto third = run_blocking(rig.io(), third_process.acquire(key, shell_spec()));
    EXPECT_FALSE(third->replaced().has_value()) << "one discard is reported once";
    EXPECT_EQ(held_id(third_process, key), second_id);
    EXPECT_FALSE(run_blocking(rig.io(), third_process.dispose(key, std::nullopt)).has_value());
}

#ifdef MAF_SANDBOX_PATH
struct CliRun {
    int status = -1;
    std::string out, err;
};

std::string slurp(const std::filesystem::path& path) {
    std::ifstream in(path, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// One `maf-sandbox exec --backend acas` process against the rig's emulator, as a user types it.
CliRun cli_exec(const Rig& rig, const std::string& thread, const std::string& program) {
    const auto out = rig.dir() / "cli.out";
    const auto err = rig.dir() / "cli.err";
    const auto command = fmt::format(
        "{} exec --backend acas --endpoint {} --subscription-id {} --resource-group rg-test "
        "--sandbox-group group-test --ca-file {} --token test-token --emulator --floor container "
        "--scope replace --thread {} -- sh -c {} >{} 2>{}",
        shell_quote(MAF_SANDBOX_PATH), shell_quote(rig.endpoint()),
        "00000000-0000-0000-0000-000000000000", shell_quote((rig.dir() / "ca.pem").string()),
        shell_quote(thread), shell_quote(program), shell_quote(out.string()),
        shell_quote(err.string()));
    const int raw = std::system(command.c_str());
    return CliRun{WIFEXITED(raw) ? WEXITSTATUS(raw) : -1, slurp(out), slurp(err)};
}

// Process 1's exec hits a dropped reply (so its sandbox is discarded, as the seed requires);
// process 2, a separate CLI run, prints that the sandbox was replaced and runs the command with
// the program's own status; process 3 is not told again.
TEST(AcasReplacement, TheNextCliProcessPrintsTheReplacementOnceAndRunsItsCommand) {
    Rig rig;
    const std::string thread = "cli-notice";
    const auto made = cli_exec(rig, thread, "echo kept > state");
    ASSERT_EQ(made.status, 0) << made.err;
    EXPECT_EQ(made.err.find("sandbox replaced"), std::string::npos) << made.err;
    std::string first_id;
    {
        // Process 1 (this one): the same key and spec the CLI uses, so it adopts that sandbox.
        acas::AcasBackend first_process(rig.config());
        const SandboxKey key{"replace", thread, "cli", ""};
        SandboxSpecFields f;
        f.kind = "shell";
        f.image = "host";
        f.requires_capabilities = {Capability::exec};
        auto first = run_blocking(rig.io(), first_process.acquire(key, SandboxSpec(f)));
        first_id = first_process.held_sandbox_id(key, "shell").value_or("");
        ASSERT_EQ(run(rig.io(), *first, "cat state").stdout_bytes, "kept\n");
        rig.set_faults({{"dropRate", 1.0}, {"only", "POST /sandboxes/{id}/executeShellCommand"}});
        EXPECT_THROW(run(rig.io(), *first, "echo once >> state"), acas::AcasRequestOutcomeUnknown);
        rig.set_faults({});
    }
    const auto told = cli_exec(rig, thread, "cat state 2>/dev/null; echo two; exit 3");
    EXPECT_EQ(told.status, 3) << told.err;
    EXPECT_EQ(told.out, "two\n") << "the state is gone, as the notice says";
    EXPECT_NE(told.err.find("[maf-sandbox: sandbox replaced, state lost: "), std::string::npos)
        << told.err;
    EXPECT_NE(told.err.find(first_id), std::string::npos) << told.err;

    const auto again = cli_exec(rig, thread, "echo three");
    EXPECT_EQ(again.status, 0) << again.err;
    EXPECT_EQ(again.out, "three\n");
    EXPECT_EQ(again.err.find("sandbox replaced"), std::string::npos) << "told twice: " << again.err;
    EXPECT_EQ(rig.live().size(), 1u);
}

#endif  // MAF_SANDBOX_PATH

}  // namespace
}  // namespace maf_sandbox::emulator::testing
