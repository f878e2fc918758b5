// The churn scenario: create and dispose call-scoped sandboxes back to back, then from one worker
// per CPU at once, and count what they leave behind (local_bench.hpp).
#include <algorithm>
#include <iostream>
#include <thread>

#include <fmt/format.h>

#include "local_bench.hpp"
#include "maf_sandbox/core/errors.hpp"
#include "maf_sandbox/core/run_blocking.hpp"
#include "measure.hpp"

namespace maf_sandbox::bench {

namespace fs = std::filesystem;
namespace json = boost::json;

// What the churn's own sandboxes left behind (other processes may be creating sandboxes of
// their own at the same time, so only these ids count).
Footprint LocalBench::leftovers(const std::set<std::string>& ids) const {
    Footprint f;
    std::error_code ec;
    for (const auto& id : ids) {
        f.sandbox_dirs += fs::exists(state_dir_ / "sandboxes" / id, ec) ? 1 : 0;
    }
    for (const auto& info : backend_->list({})) {
        f.records += ids.count(info.id);
    }
    // maf-sbx-<id> cgroups anywhere under the cgroup mount points, to depth 4.
    for (fs::recursive_directory_iterator
             it("/sys/fs/cgroup", fs::directory_options::skip_permission_denied, ec),
         end;
         !ec && it != end; it.increment(ec)) {
        if (it.depth() > 4) {
            it.disable_recursion_pending();
            continue;
        }
        const auto name = it->path().filename().string();
        if (name.starts_with("maf-sbx-")) {
            f.cgroups += ids.count(name.substr(8));
            it.disable_recursion_pending();
        }
    }
    return f;
}

json::object LocalBench::churn() {
    std::set<std::string> ids;
    std::vector<double> ours, base, acquires, disposals;
    const auto started = Clock::now();
    double untimed = 0;
    for (int i = 0; i < plan_.churn_cycles; ++i) {
        const SandboxKey key{"bench", "churn", "bench", fmt::format("c{}", i)};
        auto start = Clock::now();
        run_blocking(backend_->acquire(key, bench_spec(IsolationScope::call)));
        double cycle = ms_since(start);
        acquires.push_back(cycle);
        start = Clock::now();
        for (const auto& info : backend_->list({fmt::format("call={}", key.call_id)})) {
            ids.insert(info.id);  // untimed: for the leak check
        }
        untimed += ms_since(start);
        start = Clock::now();
        const auto failure = run_blocking(backend_->dispose(key, std::nullopt));
        disposals.push_back(ms_since(start));
        cycle += disposals.back();
        ours.push_back(cycle);
        if (failure) {
            throw Error(fmt::format("churn cycle {}: dispose failed: {}", i, failure->detail));
        }
        if (i % 10 == 0) {
            if (auto ms = sample_bwrap()) {
                base.push_back(*ms);
                untimed += *ms;
            }
        }
    }
    const double seconds = (ms_since(started) - untimed) / 1000.0;
    const Footprint left = leftovers(ids);
    auto out = scenario("churn_create_dispose", "bwrap_true", ours, base);
    out["cycles"] = plan_.churn_cycles;
    out["acquire_stats"] = to_json(stats_of(acquires));
    out["dispose_stats"] = to_json(stats_of(disposals));
    out["cycles_per_s"] = static_cast<double>(plan_.churn_cycles) / seconds;
    const std::size_t window = std::min<std::size_t>(1000, ours.size() / 4);
    if (window > 0) {
        const std::vector<double> first(ours.begin(), ours.begin() + window);
        const std::vector<double> last(ours.end() - window, ours.end());
        out["window"] = window;
        out["p99_first_ms"] = stats_of(first).p99;
        out["p99_last_ms"] = stats_of(last).p99;
        out["p99_last_over_first"] = stats_of(last).p99 / stats_of(first).p99;
    }
    out["leaked"] = json::object{
        {"sandbox_dirs", left.sandbox_dirs}, {"cgroups", left.cgroups}, {"records", left.records}};
    std::cout << fmt::format(
        "  churn: {:.1f} cycles/s (acquire p50 {:.1f} ms, dispose p50 {:.1f} ms); leaked dirs "
        "{} cgroups {} records {}\n",
        out["cycles_per_s"].to_number<double>(), stats_of(acquires).p50, stats_of(disposals).p50,
        left.sandbox_dirs, left.cgroups, left.records);
    out["parallel"] = churn_parallel();
    return out;
}

// The same cycles again from one worker per CPU at once, each with its own keys: "cycles
// per second sustained" on an N-core host includes N cycles in flight. Cycles/s is
// over the phase's wall time, nothing subtracted. The leak check counts what is left of any
// churn sandbox: sandbox directories without a live record, their cgroups, churn records.
json::object LocalBench::churn_parallel() {
    const unsigned workers = std::max(1u, std::thread::hardware_concurrency());
    const int per_worker = std::max(1, plan_.churn_cycles / static_cast<int>(workers));
    std::vector<std::vector<double>> acquires(workers), disposals(workers);
    std::vector<std::string> failures(workers);
    const auto started = Clock::now();
    {
        std::vector<std::thread> threads;
        for (unsigned w = 0; w < workers; ++w) {
            threads.emplace_back([&, w] {
                try {
                    for (int i = 0; i < per_worker; ++i) {
                        const SandboxKey key{"bench", "churn", "bench",
                                             fmt::format("w{}-{}", w, i)};
                        auto start = Clock::now();
                        run_blocking(backend_->acquire(key, bench_spec(IsolationScope::call)));
                        acquires[w].push_back(ms_since(start));
                        start = Clock::now();
                        const auto failure = run_blocking(backend_->dispose(key, std::nullopt));
                        disposals[w].push_back(ms_since(start));
                        if (failure) {
                            failures[w] = failure->detail;
                            return;
                        }
                    }
                } catch (const std::exception& e) {
                    failures[w] = e.what();
                }
            });
        }
        for (auto& thread : threads) {
            thread.join();
        }
    }
    const double seconds = ms_since(started) / 1000.0;
    for (const auto& failure : failures) {
        if (!failure.empty()) {
            throw Error(fmt::format("parallel churn: {}", failure));
        }
    }
    std::vector<double> all_acquires, all_disposals;
    for (unsigned w = 0; w < workers; ++w) {
        all_acquires.insert(all_acquires.end(), acquires[w].begin(), acquires[w].end());
        all_disposals.insert(all_disposals.end(), disposals[w].begin(), disposals[w].end());
    }
    std::set<std::string> live, orphans;
    std::size_t records = 0;
    for (const auto& info : backend_->list({})) {
        live.insert(info.id);
        records += info.labels.count("thread") && info.labels.at("thread") == "churn";
    }
    std::error_code ec;
    for (fs::directory_iterator it(state_dir_ / "sandboxes", ec), end; !ec && it != end;
         it.increment(ec)) {
        const auto name = it->path().filename().string();
        if (!live.count(name)) {
            orphans.insert(name);
        }
    }
    const Footprint left = leftovers(orphans);
    const auto cycles = static_cast<double>(all_acquires.size());
    json::object out{{"workers", workers},
                     {"cycles", all_acquires.size()},
                     {"cycles_per_s", cycles / seconds},
                     {"acquire_stats", to_json(stats_of(all_acquires))},
                     {"dispose_stats", to_json(stats_of(all_disposals))},
                     {"leaked", json::object{{"sandbox_dirs", orphans.size()},
                                             {"cgroups", left.cgroups},
                                             {"records", records}}}};
    std::cout << fmt::format(
        "  churn, {} workers: {:.1f} cycles/s (acquire p50 {:.1f} ms, dispose p50 {:.1f} ms); "
        "leaked dirs {} cgroups {} records {}\n",
        workers, cycles / seconds, stats_of(all_acquires).p50, stats_of(all_disposals).p50,
        orphans.size(), left.cgroups, records);
    return out;
}

}  // namespace maf_sandbox::bench
