// The peers' scenarios: `maf-sandbox run` and a warm `maf-sandbox exec`, whole process, against
// the container runtimes a user might pick instead (oci_peers.hpp), in one interleaved loop so
// that every ratio is taken in the same minute. A peer that cannot run here is skipped with a
// note, and its scenarios say so instead of a ratio.
#include <fmt/format.h>

#include "local_bench.hpp"
#include "measure.hpp"
#include "oci_peers.hpp"

namespace maf_sandbox::bench {

namespace json = boost::json;

namespace {

json::object skipped(const std::string& name, const std::string& baseline, const std::string& why) {
    return json::object{{"name", name},
                        {"baseline", baseline},
                        {"skipped", why},
                        {"stats", to_json(Stats{})},
                        {"baseline_stats", nullptr},
                        {"ratio_p50", nullptr},
                        {"ratio_p99", nullptr}};
}

}  // namespace

std::vector<json::object> LocalBench::peers() {
    std::vector<json::object> out;
    const auto front = front_end();
    if (front.empty()) {
        log_->warn("cannot find this executable; the peer comparisons are skipped");
        return out;
    }
    std::string why_workspace;
    auto workspace = OciWorkspace::create(why_workspace);
    struct Runtime {
        std::string name;
        std::optional<OciRuntimePeer> peer;
        std::string why;
        std::vector<double> runs, execs;
    };
    std::vector<Runtime> runtimes;
    runtimes.reserve(2);
    for (const char* name : {"runc", "crun"}) {
        std::string why = why_workspace;
        auto peer = workspace ? OciRuntimePeer::create(name, *workspace, why) : std::nullopt;
        runtimes.push_back(Runtime{name, std::move(peer), why, {}, {}});
    }
    std::string podman_why = why_workspace;
    auto podman = workspace ? PodmanPeer::create(*workspace, podman_why) : std::nullopt;
    for (const auto& r : runtimes) {
        if (!r.peer) {
            log_->warn("peer {} skipped: {}", r.name, r.why);
        }
    }
    if (!podman) {
        log_->warn("peer podman skipped: {}", podman_why);
    }

    const auto run = front_end_run_true(front);
    const auto exec = front_end_exec_true(front, "peers");
    time_front_end(exec);  // creates the warm sandbox
    std::vector<double> our_runs, our_execs, podman_runs;
    for (int i = 0; i < plan_.cli_rounds; ++i) {
        our_runs.push_back(time_front_end(run));
        for (auto& r : runtimes) {
            if (r.peer) {
                r.runs.push_back(r.peer->sample_run());
            }
        }
        if (podman) {
            podman_runs.push_back(podman->sample_run());
        }
        our_execs.push_back(time_front_end(exec));
        for (auto& r : runtimes) {
            if (r.peer) {
                if (auto ms = r.peer->sample_exec(r.why)) {
                    r.execs.push_back(*ms);
                }
            }
        }
    }
    for (const auto& r : runtimes) {
        const auto run_name = fmt::format("peer_run_true_vs_{}", r.name);
        const auto exec_name = fmt::format("peer_exec_warm_true_vs_{}", r.name);
        const auto run_base = fmt::format("{}_run_true", r.name);
        const auto exec_base = fmt::format("{}_exec_true", r.name);
        out.push_back(r.runs.empty() ? skipped(run_name, run_base, r.why)
                                     : scenario(run_name, run_base, our_runs, r.runs));
        out.push_back(r.execs.empty() ? skipped(exec_name, exec_base, r.why)
                                      : scenario(exec_name, exec_base, our_execs, r.execs));
    }
    out.push_back(
        podman_runs.empty()
            ? skipped("peer_run_true_vs_podman", "podman_run_true", podman_why)
            : scenario("peer_run_true_vs_podman", "podman_run_true", our_runs, podman_runs));
    return out;
}

}  // namespace maf_sandbox::bench
