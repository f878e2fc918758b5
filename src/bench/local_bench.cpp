// The run of the local scenarios, their baselines and how each result is printed and recorded
// (local_bench.hpp).
#include "local_bench.hpp"

#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <thread>
#include <utility>

#include <fmt/format.h>

#include "acas_scenarios.hpp"
#include "density.hpp"
#include "maf_sandbox/core/errors.hpp"
#include "maf_sandbox/core/run_blocking.hpp"
#include "measure.hpp"

extern char** environ;

namespace maf_sandbox::bench {

namespace fs = std::filesystem;
namespace json = boost::json;

Plan plan_for(bool quick) {
    if (quick) {
        return Plan{true, 300, 200, 15, 15, 30, 100, 5, 0, 200, 12, 20};
    }
    return Plan{false, 3000, 2000, 150, 150, 300, 1000, 30, 2, 10000, 100, 1000};
}

SandboxSpec bench_spec(IsolationScope scope) {
    SandboxSpecFields fields;
    fields.kind = "bench";
    fields.isolation_scope = scope;
    fields.requires_capabilities = {Capability::exec, Capability::files_in, Capability::files_out};
    return SandboxSpec(fields);
}

ExecRequest command_request(Argv argv, std::uint64_t max_output) {
    ExecRequest request;
    request.command = std::move(argv);
    request.max_output_bytes = max_output;
    return request;
}

LocalBench::LocalBench(const Plan& plan, std::vector<std::string> only,
                       std::shared_ptr<spdlog::logger> log)
    : plan_(plan), only_(std::move(only)), log_(std::move(log)) {
    std::string pattern = "/tmp/maf-bench-XXXXXX";
    if (::mkdtemp(pattern.data()) == nullptr) {
        throw SystemError(errno, "creating the benchmark's state directory");
    }
    state_dir_ = pattern;
    local::LocalBackendConfig config;
    config.state_dir = state_dir_;
    backend_ = std::make_unique<local::LocalBackend>(config);
    env_strings_ = {fmt::format("MAF_SANDBOX_STATE_DIR={}", state_dir_.string()),
                    "PATH=/usr/local/bin:/usr/bin:/bin"};
    if (const char* supervisor = std::getenv("MAF_SANDBOX_SUPERVISOR")) {
        env_strings_.push_back(fmt::format("MAF_SANDBOX_SUPERVISOR={}", supervisor));
    }
    for (auto& line : env_strings_) {
        child_env_.push_back(line.data());
    }
    child_env_.push_back(nullptr);
    std::error_code ec;
    self_ = fs::read_symlink("/proc/self/exe", ec).string();
    bwrap_ = find_program("bwrap");
    unshare_ = find_program("unshare");
}

LocalBench::~LocalBench() {
    try {
        for (const auto& info : backend_->list({})) {
            backend_->remove(info.id);
        }
    } catch (const std::exception& e) {
        log_->warn("cleaning up the benchmark's sandboxes: {}", e.what());
    }
    backend_.reset();
    std::error_code ec;
    fs::remove_all(state_dir_, ec);
}

json::object LocalBench::run() {
    const auto started = Clock::now();
    json::array scenarios;
    const auto add = [&](json::object scenario) {
        print(scenario);
        scenarios.emplace_back(std::move(scenario));
    };
    const auto wanted = [&](std::string_view prefix) {
        return only_.empty() || std::any_of(only_.begin(), only_.end(), [&](const auto& o) {
                   return std::string_view(o).starts_with(prefix) ||
                          prefix.starts_with(std::string_view(o));
               });
    };
    const std::pair<const char*, std::function<void()>> steps[] = {
        {"exec_true", [&] { add(exec_true()); }},
        {"exec_true_spaced", [&] { add(exec_true_spaced()); }},
        {"warm_acquire", [&] { add(warm_acquire()); }},
        {"cold_acquire_to", [&] { add(cold_acquire()); }},
        {"cold_acquire_pooled", [&] { add(cold_acquire_pooled()); }},
        {"exec_1MiB", [&] { add(exec_output()); }},
        {"exec_stream_echo", [&] { add(exec_stream_first_byte()); }},
        {"file_write_read_3KiB", [&] { add(files(3 * 1024, plan_.small_file_samples, "3KiB")); }},
        {"file_write_read_32MiB", [&] { add(files(32u << 20, plan_.big_file_samples, "32MiB")); }},
        {"file_write_read_1GiB",
         [&] {
             // A quick run has no 1 GiB samples unless the scenario is named in full.
             const bool named =
                 std::find(only_.begin(), only_.end(), "file_write_read_1GiB") != only_.end();
             if (const int samples = std::max(plan_.giant_file_samples, named ? 1 : 0)) {
                 add(files(1u << 30, samples, "1GiB"));
             }
         }},
        {"churn", [&] { add(churn()); }},
        {"density",
         [&] {
             add(density_scenario(
                 *backend_, plan_.density_sandboxes,
                 [&](const auto& ids) {
                     const Footprint f = leftovers(ids);
                     return DensityLeaks{f.sandbox_dirs, f.cgroups, f.records};
                 },
                 *log_));
         }},
        {"acas_",
         [&] {
             acas_scenarios(
                 *backend_, {plan_.quick, wanted, only_},
                 [&](AcasScenario s) {
                     auto out = scenario(s.name, s.baseline, s.ours, s.base);
                     for (auto& [key, value] : s.extra) {
                         out[key] = std::move(value);
                     }
                     add(std::move(out));
                 },
                 *log_);
         }},
        {"cli_",
         [&] {
             for (auto& scenario : cli()) {
                 add(std::move(scenario));
             }
         }},
        {"peer_", [&] {
             for (auto& scenario : peers()) {
                 add(std::move(scenario));
             }
         }}};
    for (const auto& [prefix, step] : steps) {
        if (wanted(prefix)) {
            step();
        }
    }
    json::object baselines;
    baselines["posix_spawn_true"] = to_json(stats_of(all_spawn_));
    baselines["bwrap_true"] = bwrap_ ? json::value(to_json(stats_of(all_bwrap_))) : nullptr;
    baselines["unshare_true"] = unshare_ ? json::value(to_json(stats_of(all_unshare_))) : nullptr;
    utsname uts{};
    ::uname(&uts);
    json::object out{
        {"schema", "maf-sandbox-bench/1"},
        {"mode", plan_.quick ? "quick" : "full"},
        {"machine", json::object{{"cpus", std::thread::hardware_concurrency()},
                                 {"kernel", fmt::format("{} {}", uts.sysname, uts.release)},
                                 {"arch", uts.machine}}},
        {"baselines", std::move(baselines)},
        {"scenarios", std::move(scenarios)},
    };
    out["duration_s"] = ms_since(started) / 1000.0;
    std::cout << "\nbaselines over the whole run (p50):";
    const std::pair<const char*, const std::vector<double>*> summary[] = {
        {"posix_spawn", &all_spawn_}, {"bwrap", &all_bwrap_}, {"unshare -Urn", &all_unshare_}};
    for (const auto& [label, samples] : summary) {
        if (!samples->empty()) {
            std::cout << fmt::format(" {} {:.3f} ms", label, stats_of(*samples).p50);
        }
    }
    std::cout << fmt::format("; {:.1f} s in all\n", ms_since(started) / 1000.0);
    return out;
}

double LocalBench::sample_spawn() {
    const auto start = Clock::now();
    spawn_and_wait({"/bin/true"}, environ);
    const double ms = ms_since(start);
    all_spawn_.push_back(ms);
    return ms;
}

std::optional<double> LocalBench::sample_bwrap() {
    if (!bwrap_) {
        return std::nullopt;
    }
    const auto start = Clock::now();
    const auto result = spawn_and_wait({*bwrap_, "--unshare-all", "--ro-bind", "/", "/", "--proc",
                                        "/proc", "--dev", "/dev", "/bin/true"},
                                       environ);
    const double ms = ms_since(start);
    if (result.status != 0) {
        log_->warn("bwrap exited {}; bubblewrap cannot run here, its baseline is skipped",
                   result.status);
        bwrap_.reset();
        return std::nullopt;
    }
    all_bwrap_.push_back(ms);
    return ms;
}

void LocalBench::sample_unshare() {
    if (!unshare_) {
        return;
    }
    const auto start = Clock::now();
    const auto result = spawn_and_wait({*unshare_, "-Urn", "/bin/true"}, environ);
    if (result.status != 0) {
        unshare_.reset();
        return;
    }
    all_unshare_.push_back(ms_since(start));
}

// One of ours, then one of the baseline (plus one unshare sample now and then, so that
// baseline spans the run too).
json::object LocalBench::scenario(const std::string& name, const std::string& baseline,
                                  const std::vector<double>& ours,
                                  const std::vector<double>& base) {
    const Stats a = stats_of(ours);
    json::object out{{"name", name}, {"stats", to_json(a)}, {"baseline", baseline}};
    if (base.empty()) {
        out["baseline_stats"] = nullptr;
        out["ratio_p50"] = nullptr;
        out["ratio_p99"] = nullptr;
        return out;
    }
    const Stats b = stats_of(base);
    out["baseline_stats"] = to_json(b);
    out["ratio_p50"] = a.p50 / b.p50;
    out["ratio_p95"] = a.p95 / b.p95;
    out["ratio_p99"] = a.p99 / b.p99;
    out["ratio_p99_to_baseline_p50"] = a.p99 / b.p50;
    return out;
}

void LocalBench::print(const json::object& s) {
    if (const auto* why = s.if_contains("skipped")) {
        std::cout << fmt::format("{:34s} skipped: {}\n", std::string(s.at("name").as_string()),
                                 std::string(why->as_string()))
                  << std::flush;
        return;
    }
    const auto& stats = s.at("stats").as_object();
    std::cout << fmt::format(
        "{:34s} p50 {:9.3f} ms  p95 {:9.3f}  p99 {:9.3f}  (n={})",
        std::string(s.at("name").as_string()), stats.at("p50_ms").to_number<double>(),
        stats.at("p95_ms").to_number<double>(), stats.at("p99_ms").to_number<double>(),
        stats.at("n").to_number<std::uint64_t>());
    if (const auto* ratio = s.if_contains("ratio_p50"); ratio && !ratio->is_null()) {
        std::cout << fmt::format("  x{:.2f} {} (p99 x{:.2f})", ratio->to_number<double>(),
                                 std::string(s.at("baseline").as_string()),
                                 s.at("ratio_p99").to_number<double>());
    }
    std::cout << "\n" << std::flush;
}

// The kernel finishes tearing a disposed sandbox's namespaces down in the background (network
// namespaces in a kernel worker); the next timed sample should not pay for the previous
// iteration's disposal, so the cold loops wait this long, untimed.
void LocalBench::settle() {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
}

SandboxKey LocalBench::warm_key() const {
    return {"bench", "warm", "bench", ""};
}

std::shared_ptr<Sandbox> LocalBench::warm_sandbox() {
    return run_blocking(backend_->acquire(warm_key(), bench_spec(IsolationScope::conversation)));
}

}  // namespace maf_sandbox::bench
