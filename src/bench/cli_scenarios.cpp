// The whole-process scenarios: the `maf-sandbox` front end run as a user runs it, warm, cold and
// from the shared pool (local_bench.hpp).
#include <chrono>
#include <thread>

#include <fmt/format.h>

#include "local_bench.hpp"
#include "maf_sandbox/core/errors.hpp"
#include "maf_sandbox/local/shared_pool.hpp"
#include "maf_sandbox/local/warm_lookup.hpp"
#include "measure.hpp"

namespace maf_sandbox::bench {

namespace fs = std::filesystem;
namespace json = boost::json;

std::vector<std::string> front_end_run_true(const std::string& front) {
    return {front, "run", "--backend", "local", "--floor", "container", "--", "/bin/true"};
}

std::vector<std::string> front_end_exec_true(const std::string& front, const std::string& thread) {
    return {front,     "exec",  "--backend", "local", "--floor", "container",
            "--scope", "bench", "--thread",  thread,  "--",      "/bin/true"};
}

// Whole-process comparisons, as a user runs them: `maf-sandbox` is the lean front end next to
// this executable (the full CLI), which serves a warm exec and a pooled run itself.
std::vector<json::object> LocalBench::cli() {
    std::vector<json::object> out;
    const auto front = front_end();
    if (front.empty()) {
        log_->warn("cannot find this executable; the CLI comparisons are skipped");
        return out;
    }
    const auto run = front_end_run_true(front);
    const auto exec = front_end_exec_true(front, "cli");
    const std::vector<std::string> version = {front, "--version"};
    const auto timed = [&](const std::vector<std::string>& argv) { return time_front_end(argv); };
    timed(exec);  // creates the warm sandbox
    std::vector<double> base, runs, execs, versions;
    for (int i = 0; i < plan_.cli_rounds; ++i) {
        if (auto ms = sample_bwrap()) {
            base.push_back(*ms);
        }
        runs.push_back(timed(run));
        execs.push_back(timed(exec));
        versions.push_back(timed(version));
    }
    out.push_back(scenario("cli_run_true", "bwrap_true", runs, base));
    out.push_back(scenario("cli_exec_warm_true", "bwrap_true", execs, base));
    out.push_back(scenario("cli_startup_version", "bwrap_true", versions, base));

    // The same `run`, served from the shared pool (`maf-sandbox pool set --size 1`). The
    // refill each run leaves behind is waited for, untimed, before the next pair of samples:
    // an agent's one-shot runs are seconds apart.
    timed({front, "pool", "set", "--size", "1"});
    std::vector<double> pooled_base, pooled;
    for (int i = 0; i < plan_.cli_rounds; ++i) {
        wait_for_shared_pool();
        if (auto ms = sample_bwrap()) {
            pooled_base.push_back(*ms);
        }
        pooled.push_back(timed(run));
    }
    wait_for_shared_pool();
    timed({front, "pool", "drain"});
    out.push_back(scenario("cli_run_true_pooled", "bwrap_true", pooled, pooled_base));
    return out;
}

std::string LocalBench::front_end() const {
    return self_.empty() ? std::string() : (fs::path(self_).parent_path() / "maf-sandbox").string();
}

double LocalBench::time_front_end(const std::vector<std::string>& argv) {
    const auto start = Clock::now();
    const auto result = spawn_and_wait(argv, child_env_.data());
    if (result.status != 0) {
        throw Error(
            fmt::format("`maf-sandbox {}` exited {} during the benchmark", argv[1], result.status));
    }
    return ms_since(start);
}

// Until the shared pool holds a ready sandbox again (at most 10 s).
void LocalBench::wait_for_shared_pool() {
    const auto settings = local::read_shared_pool(state_dir_);
    if (!settings) {
        return;
    }
    runtime::Registry registry(state_dir_);
    const runtime::LabelSelector selector({{local::kPoolLabel, settings->signature}});
    const auto deadline = Clock::now() + std::chrono::seconds(10);
    while (Clock::now() < deadline) {
        for (const auto& record : registry.list(selector)) {
            if (record.state == runtime::SandboxState::running && local::record_alive(record)) {
                return;
            }
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    log_->warn("the shared pool did not refill within 10 s; the next pooled run launches");
}

}  // namespace maf_sandbox::bench
