// `maf-sandbox bench [--quick] [--json FILE]`: the local backend against the kernel's floor and
// bubblewrap, measured side by side in one run (issue 9).
//
// Every scenario is measured interleaved with its baseline (one baseline sample, one of ours, and
// so on), because this machine is shared and noisy: only ratios taken in the same minute compare.
// Figures are p50/p95/p99 of wall time per operation; the JSON schema is in BENCHMARKS.md.
#include <fcntl.h>
#include <spawn.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <boost/json.hpp>

#include "bench_acas.hpp"
#include "bench_density.hpp"
#include "cli.hpp"
#include "maf_sandbox/core/errors.hpp"
#include "maf_sandbox/core/run_blocking.hpp"
#include "maf_sandbox/core/types.hpp"
#include "maf_sandbox/local/local_backend.hpp"
#include "maf_sandbox/local/shared_pool.hpp"
#include "maf_sandbox/local/warm_lookup.hpp"

extern char** environ;

namespace maf_sandbox::cli {

namespace {

namespace fs = std::filesystem;
namespace json = boost::json;
using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point start) {
    return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

// --- statistics ---------------------------------------------------------------------------------

struct Stats {
    std::size_t n = 0;
    double p50 = 0, p95 = 0, p99 = 0, mean = 0, min = 0, max = 0;
};

Stats stats_of(std::vector<double> samples) {
    Stats s;
    s.n = samples.size();
    if (samples.empty()) {
        return s;
    }
    std::sort(samples.begin(), samples.end());
    const auto rank = [&](double q) {
        const auto index = static_cast<std::size_t>(std::ceil(q * static_cast<double>(s.n))) - 1;
        return samples[std::min(index, s.n - 1)];
    };
    s.p50 = rank(0.50);
    s.p95 = rank(0.95);
    s.p99 = rank(0.99);
    s.min = samples.front();
    s.max = samples.back();
    double sum = 0;
    for (const double v : samples) {
        sum += v;
    }
    s.mean = sum / static_cast<double>(s.n);
    return s;
}

json::object to_json(const Stats& s) {
    return json::object{{"n", s.n},        {"p50_ms", s.p50},   {"p95_ms", s.p95},
                        {"p99_ms", s.p99}, {"mean_ms", s.mean}, {"min_ms", s.min},
                        {"max_ms", s.max}};
}

// --- processes ----------------------------------------------------------------------------------

struct Spawned {
    int status = -1;
    std::uint64_t stdout_bytes = 0;
};

// posix_spawn + wait; stdout is read (and counted) when `capture`, else it goes to /dev/null.
Spawned spawn_and_wait(const std::vector<std::string>& argv, char** envp, bool capture = false) {
    std::vector<char*> args;
    for (const auto& arg : argv) {
        args.push_back(const_cast<char*>(arg.c_str()));
    }
    args.push_back(nullptr);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    int out[2] = {-1, -1};
    if (capture) {
        if (::pipe2(out, O_CLOEXEC) != 0) {
            throw SystemError(errno, "creating a pipe for the benchmark");
        }
        posix_spawn_file_actions_adddup2(&actions, out[1], 1);
    } else {
        posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
    }
    posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0);
    pid_t pid = 0;
    const int rc = posix_spawn(&pid, args[0], &actions, nullptr, args.data(), envp);
    posix_spawn_file_actions_destroy(&actions);
    Spawned result;
    if (capture) {
        ::close(out[1]);
    }
    if (rc != 0) {
        if (capture) {
            ::close(out[0]);
        }
        throw SystemError(rc, fmt::format("starting {}", argv[0]));
    }
    if (capture) {
        char buffer[65536];
        ssize_t n = 0;
        while ((n = ::read(out[0], buffer, sizeof buffer)) > 0 || (n < 0 && errno == EINTR)) {
            result.stdout_bytes += n > 0 ? static_cast<std::uint64_t>(n) : 0;
        }
        ::close(out[0]);
    }
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    result.status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    return result;
}

std::optional<std::string> find_program(const std::string& name) {
    for (const char* dir : {"/usr/bin", "/bin", "/usr/sbin", "/sbin", "/usr/local/bin"}) {
        const auto path = fmt::format("{}/{}", dir, name);
        if (::access(path.c_str(), X_OK) == 0) {
            return path;
        }
    }
    return std::nullopt;
}

// --- the run ------------------------------------------------------------------------------------

struct Plan {
    bool quick = true;
    int spawn_pairs, warm_pairs, cold_samples, pooled_samples, output_samples, small_file_samples,
        big_file_samples, giant_file_samples, churn_cycles, cli_rounds;
    int density_sandboxes;  // idle sandboxes alive at once (bench_density.hpp)
};

Plan plan_for(bool quick) {
    if (quick) {
        return Plan{true, 300, 200, 15, 15, 30, 100, 5, 0, 200, 12, 20};
    }
    return Plan{false, 3000, 2000, 150, 150, 300, 1000, 30, 2, 10000, 100, 1000};
}

std::uint64_t fnv1a(std::string_view bytes) {
    std::uint64_t hash = 1469598103934665603ull;
    for (const unsigned char c : bytes) {
        hash = (hash ^ c) * 1099511628211ull;
    }
    return hash;
}

std::string random_bytes(std::size_t size, std::uint32_t seed) {
    std::string out(size, '\0');
    std::mt19937_64 rng(seed);
    for (std::size_t i = 0; i + 8 <= size; i += 8) {
        const auto word = rng();
        std::memcpy(out.data() + i, &word, 8);
    }
    for (std::size_t i = size - size % 8; i < size; ++i) {
        out[i] = static_cast<char>(rng());
    }
    return out;
}

SandboxSpec bench_spec(IsolationScope scope) {
    SandboxSpecFields fields;
    fields.kind = "bench";
    fields.isolation_scope = scope;
    fields.requires_capabilities = {Capability::exec, Capability::files_in, Capability::files_out};
    return SandboxSpec(fields);
}

ExecRequest command_request(Argv argv, std::uint64_t max_output = 1u << 20) {
    ExecRequest request;
    request.command = std::move(argv);
    request.max_output_bytes = max_output;
    return request;
}

// Counts what a sandbox leaves in the kernel and on disk, for the churn's leak check.
struct Footprint {
    std::size_t sandbox_dirs = 0;
    std::size_t cgroups = 0;
    std::size_t records = 0;
};

class Bench {
  public:
    Bench(const Plan& plan, std::vector<std::string> only, std::shared_ptr<spdlog::logger> log)
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

    ~Bench() {
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

    json::object run() {
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
            {"file_write_read_3KiB",
             [&] { add(files(3 * 1024, plan_.small_file_samples, "3KiB")); }},
            {"file_write_read_32MiB",
             [&] { add(files(32u << 20, plan_.big_file_samples, "32MiB")); }},
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
                 add(bench_density(
                     *backend_, plan_.density_sandboxes,
                     [&](const auto& ids) {
                         const Footprint f = leftovers(ids);
                         return DensityLeaks{f.sandbox_dirs, f.cgroups, f.records};
                     },
                     *log_));
             }},
            {"acas_",
             [&] {
                 bench_acas(
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
            {"cli_", [&] {
                 for (auto& scenario : cli()) {
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
        baselines["unshare_true"] =
            unshare_ ? json::value(to_json(stats_of(all_unshare_))) : nullptr;
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

  private:
    // --- baselines, each sample also kept for the run-wide figures ---

    double sample_spawn() {
        const auto start = Clock::now();
        spawn_and_wait({"/bin/true"}, environ);
        const double ms = ms_since(start);
        all_spawn_.push_back(ms);
        return ms;
    }

    std::optional<double> sample_bwrap() {
        if (!bwrap_) {
            return std::nullopt;
        }
        const auto start = Clock::now();
        const auto result = spawn_and_wait({*bwrap_, "--unshare-all", "--ro-bind", "/", "/",
                                            "--proc", "/proc", "--dev", "/dev", "/bin/true"},
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

    void sample_unshare() {
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
    json::object scenario(const std::string& name, const std::string& baseline,
                          const std::vector<double>& ours, const std::vector<double>& base) {
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

    void print(const json::object& s) {
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
    static void settle() { std::this_thread::sleep_for(std::chrono::milliseconds(20)); }

    SandboxKey warm_key() const { return {"bench", "warm", "bench", ""}; }

    std::shared_ptr<Sandbox> warm_sandbox() {
        return run_blocking(
            backend_->acquire(warm_key(), bench_spec(IsolationScope::conversation)));
    }

    json::object exec_true() {
        auto sandbox = warm_sandbox();
        run_blocking(sandbox->exec(command_request(Argv{"true"})));  // warm the path
        std::vector<double> ours, base;
        for (int i = 0; i < plan_.spawn_pairs; ++i) {
            base.push_back(sample_spawn());
            const auto start = Clock::now();
            const auto result = run_blocking(sandbox->exec(command_request(Argv{"true"})));
            ours.push_back(ms_since(start));
            if (result.exit_code != 0) {
                throw Error(fmt::format("`true` exited {} in the sandbox", result.exit_code));
            }
            if (i % 10 == 0) {
                sample_unshare();
            }
        }
        return scenario("exec_true", "posix_spawn_true", ours, base);
    }

    // The same with 10 ms of idle time before each pair (untimed), as an agent's execs are spaced
    // by its model's turns: the supervisor's preparation of the next exec (fork, cgroup joins,
    // seccomp) is then done before it is needed, where the tight loop above also measures it
    // competing for the CPU.
    json::object exec_true_spaced() {
        auto sandbox = warm_sandbox();
        std::vector<double> ours, base;
        for (int i = 0; i < plan_.spawn_pairs / 3; ++i) {
            std::this_thread::sleep_for(std::chrono::milliseconds(10));
            base.push_back(sample_spawn());
            std::this_thread::sleep_for(std::chrono::milliseconds(10));
            const auto start = Clock::now();
            run_blocking(sandbox->exec(command_request(Argv{"true"})));
            ours.push_back(ms_since(start));
        }
        return scenario("exec_true_spaced", "posix_spawn_true", ours, base);
    }

    json::object warm_acquire() {
        warm_sandbox();
        std::vector<double> ours, base;
        for (int i = 0; i < plan_.warm_pairs; ++i) {
            base.push_back(sample_spawn());
            const auto start = Clock::now();
            warm_sandbox();
            ours.push_back(ms_since(start));
        }
        return scenario("warm_acquire", "posix_spawn_true", ours, base);
    }

    json::object cold_acquire() {
        std::vector<double> ours, base;
        for (int i = 0; i < plan_.cold_samples; ++i) {
            if (auto ms = sample_bwrap()) {
                base.push_back(*ms);
            }
            sample_unshare();
            const SandboxKey key{"bench", "cold", "bench", fmt::format("call-{}", i)};
            const auto start = Clock::now();
            auto sandbox = run_blocking(backend_->acquire(key, bench_spec(IsolationScope::call)));
            run_blocking(sandbox->exec(command_request(Argv{"true"})));
            ours.push_back(ms_since(start));
            sandbox.reset();
            run_blocking(backend_->dispose(key, std::nullopt));  // not timed
            settle();
        }
        return scenario("cold_acquire_to_first_output", "bwrap_true", ours, base);
    }

    // The same, from a backend keeping one pre-built sandbox ready (LocalBackendConfig::
    // pool_size). The refill after each take is waited for outside the timed part: this is the
    // latency of an acquire that finds the pool full, as it does between an agent's calls.
    json::object cold_acquire_pooled() {
        local::LocalBackendConfig config;
        config.state_dir = state_dir_;
        config.pool_size = 1;
        local::LocalBackend pooled(config);
        std::vector<double> ours, base;
        for (int i = -1; i < plan_.pooled_samples; ++i) {
            pooled.wait_for_pool();
            base.push_back(sample_spawn());
            const SandboxKey key{"bench", "pooled", "bench", fmt::format("call-{}", i)};
            const auto start = Clock::now();
            auto sandbox = run_blocking(pooled.acquire(key, bench_spec(IsolationScope::call)));
            run_blocking(sandbox->exec(command_request(Argv{"true"})));
            if (i >= 0) {  // the first acquire finds the pool empty and starts filling it
                ours.push_back(ms_since(start));
            } else {
                base.pop_back();
            }
            sandbox.reset();
            run_blocking(pooled.dispose(key, std::nullopt));  // not timed
            settle();
        }
        return scenario("cold_acquire_pooled_to_first_output", "posix_spawn_true", ours, base);
    }

    json::object exec_output() {
        auto sandbox = warm_sandbox();
        const std::string head = find_program("head").value_or("/usr/bin/head");
        constexpr std::uint64_t kBytes = 1u << 20;
        std::vector<double> ours, base;
        for (int i = 0; i < plan_.output_samples; ++i) {
            auto start = Clock::now();
            const auto spawned =
                spawn_and_wait({head, "-c", std::to_string(kBytes), "/dev/zero"}, environ, true);
            base.push_back(ms_since(start));
            start = Clock::now();
            const auto result = run_blocking(sandbox->exec(command_request(
                Argv{"head", "-c", std::to_string(kBytes), "/dev/zero"}, 2 * kBytes)));
            ours.push_back(ms_since(start));
            if (result.stdout_bytes.size() != kBytes || spawned.stdout_bytes != kBytes) {
                throw Error(fmt::format("the 1 MiB output came back as {} bytes (baseline {})",
                                        result.stdout_bytes.size(), spawned.stdout_bytes));
            }
        }
        auto out = scenario("exec_1MiB_stdout", "posix_spawn_head_1MiB_to_pipe", ours, base);
        out["bytes"] = kBytes;
        return out;
    }

    // Write then read back through the native file plane, checksummed, next to the same bytes
    // written to and read from a host file.
    json::object files(std::size_t size, int samples, const std::string& label) {
        auto sandbox = warm_sandbox();
        const std::string payload = random_bytes(size, static_cast<std::uint32_t>(size));
        const auto expected = fnv1a(payload);
        const fs::path host_file = state_dir_ / "host-file.bin";
        std::vector<double> write_ours, read_ours, write_base, read_base;
        bool checksums_ok = true;
        for (int i = 0; i < samples; ++i) {
            auto start = Clock::now();
            {
                std::ofstream out(host_file, std::ios::binary | std::ios::trunc);
                out.write(payload.data(), static_cast<std::streamsize>(payload.size()));
                out.close();
                if (!out) {
                    throw SystemError(
                        errno, fmt::format("writing the baseline file {}", host_file.string()));
                }
            }
            write_base.push_back(ms_since(start));
            start = Clock::now();
            {
                std::ifstream in(host_file, std::ios::binary);
                std::string back(size, '\0');
                in.read(back.data(), static_cast<std::streamsize>(size));
                checksums_ok = checksums_ok && fnv1a(back) == expected;
            }
            read_base.push_back(ms_since(start));
            // write_file takes its bytes by value and callers move a buffer in (codeact, `cp`), so
            // the copy of our payload is made untimed, as the host file is written uncopied.
            std::string content = payload;
            start = Clock::now();
            run_blocking(sandbox->write_file("bench.bin", std::move(content), ""));
            write_ours.push_back(ms_since(start));
            start = Clock::now();
            const auto back = run_blocking(sandbox->read_file("bench.bin", "", size + 1));
            read_ours.push_back(ms_since(start));
            checksums_ok = checksums_ok && back.size() == size && fnv1a(back) == expected;
        }
        std::error_code ec;
        fs::remove(host_file, ec);
        run_blocking(sandbox->remove("bench.bin", "", false));
        if (!checksums_ok) {
            throw Error(fmt::format("the {} file came back with a different checksum", label));
        }
        auto out = scenario("file_write_read_" + label, "host_file_write_read",
                            sum_pairs(write_ours, read_ours), sum_pairs(write_base, read_base));
        const auto mib_per_s = [&](const std::vector<double>& v) {
            return static_cast<double>(size) / (1u << 20) / (stats_of(v).p50 / 1000.0);
        };
        out["bytes"] = size;
        out["checksum_ok"] = checksums_ok;
        out["write_stats"] = to_json(stats_of(write_ours));
        out["read_stats"] = to_json(stats_of(read_ours));
        out["write_mib_per_s_p50"] = mib_per_s(write_ours);
        out["read_mib_per_s_p50"] = mib_per_s(read_ours);
        out["host_write_mib_per_s_p50"] = mib_per_s(write_base);
        out["host_read_mib_per_s_p50"] = mib_per_s(read_base);
        return out;
    }

    static std::vector<double> sum_pairs(const std::vector<double>& a,
                                         const std::vector<double>& b) {
        std::vector<double> out;
        for (std::size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
            out.push_back(a[i] + b[i]);
        }
        return out;
    }

    // What the churn's own sandboxes left behind (other processes may be creating sandboxes of
    // their own at the same time, so only these ids count).
    Footprint leftovers(const std::set<std::string>& ids) const {
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

    json::object churn() {
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
        out["leaked"] = json::object{{"sandbox_dirs", left.sandbox_dirs},
                                     {"cgroups", left.cgroups},
                                     {"records", left.records}};
        std::cout << fmt::format(
            "  churn: {:.1f} cycles/s (acquire p50 {:.1f} ms, dispose p50 {:.1f} ms); leaked dirs "
            "{} cgroups {} records {}\n",
            out["cycles_per_s"].to_number<double>(), stats_of(acquires).p50,
            stats_of(disposals).p50, left.sandbox_dirs, left.cgroups, left.records);
        out["parallel"] = churn_parallel();
        return out;
    }

    // The same cycles again from one worker per CPU at once, each with its own keys: "cycles
    // per second sustained" on an N-core host includes N cycles in flight (issue 9). Cycles/s is
    // over the phase's wall time, nothing subtracted. The leak check counts what is left of any
    // churn sandbox: sandbox directories without a live record, their cgroups, churn records.
    json::object churn_parallel() {
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

    // Whole-process comparisons, as a user runs them: `maf-sandbox` is the lean front end next to
    // this executable (the full CLI), which serves a warm exec and a pooled run itself.
    std::vector<json::object> cli() {
        std::vector<json::object> out;
        if (self_.empty()) {
            log_->warn("cannot find this executable; the CLI comparisons are skipped");
            return out;
        }
        const auto front = (fs::path(self_).parent_path() / "maf-sandbox").string();
        const std::vector<std::string> run = {front,     "run",       "--backend", "local",
                                              "--floor", "container", "--",        "/bin/true"};
        const std::vector<std::string> exec = {front,      "exec",      "--backend", "local",
                                               "--floor",  "container", "--scope",   "bench",
                                               "--thread", "cli",       "--",        "/bin/true"};
        const std::vector<std::string> version = {front, "--version"};
        const auto timed = [&](const std::vector<std::string>& argv) {
            const auto start = Clock::now();
            const auto result = spawn_and_wait(argv, child_env_.data());
            if (result.status != 0) {
                throw Error(fmt::format("`maf-sandbox {}` exited {} during the benchmark", argv[1],
                                        result.status));
            }
            return ms_since(start);
        };
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

    // Until the shared pool holds a ready sandbox again (at most 10 s).
    void wait_for_shared_pool() {
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

    Plan plan_;
    std::vector<std::string> only_;
    std::shared_ptr<spdlog::logger> log_;
    fs::path state_dir_;
    std::unique_ptr<local::LocalBackend> backend_;
    std::vector<std::string> env_strings_;
    std::vector<char*> child_env_;
    std::string self_;
    std::optional<std::string> bwrap_, unshare_;
    std::vector<double> all_spawn_, all_bwrap_, all_unshare_;
};

}  // namespace

void add_bench_command(CLI::App& app, Context& context) {
    struct Options {
        bool quick = false;
        std::string json_file;
        std::vector<std::string> only;
    };
    auto options = std::make_shared<Options>();
    auto* command = app.add_subcommand(
        "bench", "Measure the local backend next to posix_spawn, bwrap and unshare in one run");
    command->add_flag("--quick", options->quick, "A short run (under a minute), for CI");
    command->add_option("--json", options->json_file, "Also write every figure to FILE as JSON");
    command->add_option("--only", options->only,
                        "Run only the scenarios whose names start with this (repeatable)");
    command->callback([options, &context] {
        json::object result;
        {
            Bench bench(plan_for(options->quick), options->only, context.log);
            result = bench.run();
        }
        if (!options->json_file.empty()) {
            std::ofstream out(options->json_file, std::ios::trunc);
            out << json::serialize(result) << "\n";
            out.close();  // a write the buffer held until now fails here, not unseen at exit
            if (!out) {
                throw SystemError(errno, fmt::format("writing {}", options->json_file));
            }
        }
    });
}

}  // namespace maf_sandbox::cli
