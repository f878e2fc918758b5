// Nothing outlives its owner (issue 17, item 6): the sandbox of a one-shot `maf-sandbox run` goes
// within seconds when the front end is killed with SIGKILL (the full CLI, the lean front end that
// hands over to it, and a run the lean front end serves from the shared pool), and gc reclaims a
// one-shot sandbox whose owner is gone when no owner watch got to it. Each case first checks the
// benign state: while the front end runs, its sandbox runs and names it as owner.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include <fmt/ranges.h>

#include "maf_sandbox/runtime/host/gc.hpp"
#include "maf_sandbox/runtime/wire/owner.hpp"
#include "security_fixture.hpp"

namespace maf_sandbox::security {
namespace {

using namespace std::chrono_literals;
using runtime::Registry;
using runtime::SandboxRecord;

#ifdef MAF_SANDBOX_CLI
constexpr const char* kLean = MAF_SANDBOX_CLI;

std::string full_cli() {
    return (fs::path(kLean).parent_path() / "maf-sandbox-cli").string();
}

// Runs a CLI command to completion with the test's state directory; returns its exit status.
int run_to_end(const std::vector<std::string>& args, const fs::path& state) {
    std::string command = fmt::format("MAF_SANDBOX_STATE_DIR={}", shell_quote(state.string()));
    for (const auto& arg : args) {
        command += " " + shell_quote(arg);
    }
    command += " >/dev/null 2>&1";
    return WEXITSTATUS(std::system(command.c_str()));
}

// Starts `binary run ... -- sleep 600` with the test's state directory (and `env`, name=value
// pairs); returns its pid.
pid_t start_run(const std::string& binary, const fs::path& state,
                const std::vector<std::pair<std::string, std::string>>& env = {}) {
    const pid_t pid = ::fork();
    if (pid == 0) {
        ::setenv("MAF_SANDBOX_STATE_DIR", state.c_str(), 1);
        for (const auto& [name, value] : env) {
            ::setenv(name.c_str(), value.c_str(), 1);
        }
        const int null = ::open("/dev/null", O_RDWR);
        ::dup2(null, 0);
        ::dup2(null, 1);
        ::dup2(null, 2);
        ::execl(binary.c_str(), binary.c_str(), "run", "--backend", "local", "--floor", "container",
                "--timeout", "600", "--", "sleep", "600", nullptr);
        ::_exit(127);
    }
    return pid;
}

// The run's sandbox (kind=run) once its record names a live supervisor, or nullopt by `deadline`.
std::optional<SandboxRecord> wait_for_run(const fs::path& state, std::chrono::seconds within) {
    const auto deadline = std::chrono::steady_clock::now() + within;
    while (std::chrono::steady_clock::now() < deadline) {
        for (const auto& record : Registry(state).list()) {
            if (record.labels.count("kind") && record.labels.at("kind") == "run" &&
                Registry::is_alive(record) && runtime::recorded_owner(record)) {
                return record;
            }
        }
        std::this_thread::sleep_for(50ms);
    }
    return std::nullopt;
}

std::vector<fs::path> cgroups_of(const SandboxRecord& record) {
    std::vector<fs::path> out;
    for (const auto& path : record.runtime.at("cgroup_paths").as_array()) {
        out.emplace_back(std::string(path.as_string()));
    }
    return out;
}

// True when the record, its supervisor (the sandbox's PID 1) and its cgroups are all gone.
bool gone(const fs::path& state, const SandboxRecord& record) {
    if (Registry(state).get(record.id) || Registry::is_alive(record)) {
        return false;
    }
    std::error_code ec;
    for (const auto& cgroup : cgroups_of(record)) {
        if (fs::exists(cgroup, ec)) {
            return false;
        }
    }
    return !fs::exists(Registry(state).sandbox_dir(record.id), ec);
}

bool gone_within(const fs::path& state, const SandboxRecord& record, std::chrono::seconds within) {
    const auto deadline = std::chrono::steady_clock::now() + within;
    while (std::chrono::steady_clock::now() < deadline) {
        if (gone(state, record)) {
            return true;
        }
        std::this_thread::sleep_for(50ms);
    }
    return gone(state, record);
}

void kill_and_reap(pid_t pid) {
    ::kill(pid, SIGKILL);
    int status = 0;
    ::waitpid(pid, &status, 0);
}

// The benign half, then the kill: the front end's sandbox runs and names the front end as its
// owner; after SIGKILL of the front end alone, the sandbox is gone within a few seconds.
void expect_sandbox_dies_with(const std::string& binary, const fs::path& state) {
    const pid_t front_end = start_run(binary, state);
    ASSERT_GT(front_end, 0);
    const auto record = wait_for_run(state, 60s);
    if (!record) {
        kill_and_reap(front_end);
        FAIL() << "the run's sandbox never became live with an owner";
    }
    EXPECT_EQ(runtime::recorded_owner(*record)->pid, front_end);
    std::this_thread::sleep_for(1s);
    EXPECT_TRUE(Registry::is_alive(*record)) << "the sandbox must live while its owner does";
    EXPECT_FALSE(gone(state, *record));

    kill_and_reap(front_end);
    EXPECT_TRUE(gone_within(state, *record, 5s))
        << "the sandbox (PID 1, cgroups, record) outlived its SIGKILLed front end";
}

TEST(OneShotOwner, AFullCliRunsSandboxDiesWithItsFrontEnd) {
    TempDir state("maf-sec-owner");
    expect_sandbox_dies_with(full_cli(), state.path());
}

TEST(OneShotOwner, ALeanFrontEndsRunSandboxDiesWithIt) {
    // No pool: the lean front end hands over to the full CLI by execve, in the same process.
    TempDir state("maf-sec-owner");
    expect_sandbox_dies_with(kLean, state.path());
}

TEST(OneShotOwner, APooledRunsSandboxDiesWithItsFrontEnd) {
    TempDir state("maf-sec-owner");
    ASSERT_EQ(run_to_end({kLean, "pool", "set", "--size", "1"}, state.path()), 0);
    // Control: the pooled sandbox has no owner and outlives the process that built it.
    const auto pooled = Registry(state.path()).list();
    ASSERT_EQ(pooled.size(), 1u);
    EXPECT_FALSE(runtime::recorded_owner(pooled[0]));
    EXPECT_TRUE(Registry::is_alive(pooled[0]));

    const pid_t front_end = start_run(kLean, state.path());
    const auto record = wait_for_run(state.path(), 30s);
    if (!record) {
        kill_and_reap(front_end);
        FAIL() << "the pooled run never recorded its owner";
    }
    EXPECT_EQ(record->id, pooled[0].id) << "the run was not served from the pool";
    EXPECT_EQ(runtime::recorded_owner(*record)->pid, front_end);
    std::this_thread::sleep_for(1s);
    EXPECT_TRUE(Registry::is_alive(*record));

    kill_and_reap(front_end);
    EXPECT_TRUE(gone_within(state.path(), *record, 5s))
        << "the pooled sandbox outlived its SIGKILLed front end";
    // The pool's own sandboxes (a refill may have started) go with the test.
    run_to_end({kLean, "pool", "set", "--size", "0"}, state.path());
    for (const auto& left : Registry(state.path()).list()) {
        run_to_end({full_cli(), "rm", left.id}, state.path());
    }
}

// The owner watch of a sandbox: a process named maf-sbx-owner holding a pidfd on the sandbox's
// owner (its fdinfo names the owner's pid). No host path or sandbox id is on its command line.
std::vector<pid_t> owner_watches_of(pid_t owner) {
    const std::string wanted = fmt::format("Pid:\t{}\n", owner);
    std::vector<pid_t> found;
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator("/proc", ec)) {
        const auto name = entry.path().filename().string();
        if (name.find_first_not_of("0123456789") != std::string::npos ||
            slurp(entry.path() / "comm") != "maf-sbx-owner\n") {
            continue;
        }
        std::error_code fd_ec;
        for (const auto& info : fs::directory_iterator(entry.path() / "fdinfo", fd_ec)) {
            if (slurp(info.path()).find(wanted) != std::string::npos) {
                found.push_back(std::stoi(name));
                break;
            }
        }
    }
    return found;
}

TEST(OneShotOwner, GcReclaimsAOneShotSandboxWhoseOwnerIsGoneWhenNoWatchGotToIt) {
    TempDir state("maf-sec-owner");
    const pid_t front_end = start_run(full_cli(), state.path());
    const auto record = wait_for_run(state.path(), 60s);
    if (!record) {
        kill_and_reap(front_end);
        FAIL() << "the run's sandbox never became live with an owner";
    }
    // Control: while the owner lives, gc leaves the sandbox alone.
    Registry registry(state.path());
    auto report = runtime::reconcile(registry);
    EXPECT_EQ(report.reclaimed, 0) << fmt::format("{}", fmt::join(report.errors, "; "));
    EXPECT_TRUE(Registry::is_alive(*record));

    // The watch is lost (killed, as a host-wide `kill -9` or an OOM kill might), then the owner.
    const auto watches = owner_watches_of(front_end);
    ASSERT_EQ(watches.size(), 1u) << "expected one owner watch for the sandbox";
    ::kill(watches[0], SIGKILL);
    kill_and_reap(front_end);
    std::this_thread::sleep_for(2s);
    ASSERT_TRUE(Registry::is_alive(*record)) << "without its watch the sandbox is still running";

    report = runtime::reconcile(registry);
    EXPECT_EQ(report.reclaimed, 1) << fmt::format("{}", fmt::join(report.errors, "; "));
    EXPECT_TRUE(gone_within(state.path(), *record, 5s))
        << "gc left a one-shot sandbox whose owner is gone";
}

// An MCP server on stdio (the full CLI) whose stdin stays open; returns its pid and the pipe's
// write end, through which the requests were sent.
std::pair<pid_t, int> start_mcp_server(const fs::path& state) {
    int in[2];
    if (::pipe(in) != 0) {
        return {-1, -1};
    }
    const std::string cli = full_cli();
    const pid_t pid = ::fork();
    if (pid == 0) {
        ::setenv("MAF_SANDBOX_STATE_DIR", state.c_str(), 1);
        const int null = ::open("/dev/null", O_RDWR);
        ::dup2(in[0], 0);
        ::dup2(null, 1);
        ::dup2(null, 2);
        ::close(in[1]);
        ::execl(cli.c_str(), cli.c_str(), "mcp", "--floor", "container", nullptr);
        ::_exit(127);
    }
    ::close(in[0]);
    const std::string requests =
        R"({"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-03-26","capabilities":{},"clientInfo":{"name":"t","version":"1"}}})"
        "\n"
        R"({"jsonrpc":"2.0","method":"notifications/initialized"})"
        "\n"
        R"({"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"run_shell","arguments":{"command":"echo started"}}})"
        "\n";
    if (::write(in[1], requests.data(), requests.size()) != static_cast<ssize_t>(requests.size())) {
        ::close(in[1]);
        return {pid, -1};
    }
    return {pid, in[1]};
}

TEST(OneShotOwner, AKilledMcpServersSandboxGoesWithItAndGcLeavesALiveServersSandbox) {
    TempDir state("maf-sec-owner");
    const auto [server, input] = start_mcp_server(state.path());
    ASSERT_GT(server, 0);
    ASSERT_GE(input, 0);
    const auto deadline = std::chrono::steady_clock::now() + 60s;
    std::optional<SandboxRecord> record;
    while (!record && std::chrono::steady_clock::now() < deadline) {
        for (const auto& found : Registry(state.path()).list()) {
            if (Registry::is_alive(found) && runtime::recorded_owner(found)) {
                record = found;
            }
        }
        std::this_thread::sleep_for(50ms);
    }
    if (!record) {
        kill_and_reap(server);
        ::close(input);
        FAIL() << "the MCP server's sandbox never became live naming an owner";
    }
    EXPECT_EQ(runtime::recorded_owner(*record)->pid, server);
    // Control: while the server lives, gc leaves its sandbox alone.
    Registry registry(state.path());
    const auto report = runtime::reconcile(registry);
    EXPECT_EQ(report.reclaimed, 0) << fmt::format("{}", fmt::join(report.errors, "; "));
    EXPECT_TRUE(Registry::is_alive(*record));

    kill_and_reap(server);
    ::close(input);
    EXPECT_TRUE(gone_within(state.path(), *record, 5s))
        << "the sandbox outlived its SIGKILLed MCP server";
}

// The claim files of a private host id table (everything but its lock).
std::size_t claims_in(const fs::path& table) {
    std::size_t count = 0;
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator(table, ec)) {
        count += entry.path().filename() != ".lock";
    }
    return count;
}

TEST(OneShotOwner, RepeatedlyKilledRunsGiveTheirHostIdSlotsBack) {
    TempDir state("maf-sec-owner");
    TempDir ids("maf-sec-ids");
    // A private table and a pool of two slots no other sandbox of this host uses: leaked claims
    // would exhaust it by the third kill.
    const std::vector<std::pair<std::string, std::string>> env = {
        {"MAF_SANDBOX_ID_CLAIMS", (ids.path() / "ids").string()},
        {"MAF_SANDBOX_ID_POOL", "0x5f000000:140000"}};
    for (int round = 0; round < 4; ++round) {
        SCOPED_TRACE(fmt::format("round {}", round));
        const pid_t front_end = start_run(full_cli(), state.path(), env);
        const auto record = wait_for_run(state.path(), 60s);
        if (!record) {
            kill_and_reap(front_end);
            FAIL() << "the run's sandbox never became live (a leaked claim fills the pool)";
        }
        // Control: the live sandbox holds its claim.
        EXPECT_EQ(claims_in(ids.path() / "ids"), 1u);
        kill_and_reap(front_end);
        ASSERT_TRUE(gone_within(state.path(), *record, 5s));
        const auto deadline = std::chrono::steady_clock::now() + 5s;
        while (claims_in(ids.path() / "ids") != 0 && std::chrono::steady_clock::now() < deadline) {
            std::this_thread::sleep_for(50ms);
        }
        EXPECT_EQ(claims_in(ids.path() / "ids"), 0u)
            << "the owner watch left the SIGKILLed run's host id claim behind";
    }
}
#endif

}  // namespace
}  // namespace maf_sandbox::security
