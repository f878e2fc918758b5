// The local backend's scenarios of `maf-sandbox bench`, each measured interleaved with its baseline
// (one baseline sample, one of ours, and so on), because the machine is shared and noisy: only
// ratios taken in the same minute compare. One LocalBench owns a temporary state directory and a
// LocalBackend on it; its scenarios are spread over local_bench.cpp (the run, baselines, output),
// exec_scenarios.cpp, churn_scenarios.cpp, cli_scenarios.cpp and peer_scenarios.cpp.
#pragma once

#include <cstddef>
#include <filesystem>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <spdlog/logger.h>
#include <boost/json.hpp>

#include "maf_sandbox/core/types.hpp"
#include "maf_sandbox/local/local_backend.hpp"

namespace maf_sandbox::bench {

// How many samples each scenario takes.
struct Plan {
    bool quick = true;
    int spawn_pairs, warm_pairs, cold_samples, pooled_samples, output_samples, small_file_samples,
        big_file_samples, giant_file_samples, churn_cycles, cli_rounds;
    int density_sandboxes;  // idle sandboxes alive at once (density.hpp)
};

Plan plan_for(bool quick);

// Counts what a sandbox leaves in the kernel and on disk, for the churn's leak check.
struct Footprint {
    std::size_t sandbox_dirs = 0;
    std::size_t cgroups = 0;
    std::size_t records = 0;
};

class LocalBench {
  public:
    LocalBench(const Plan& plan, std::vector<std::string> only,
               std::shared_ptr<spdlog::logger> log);
    ~LocalBench();
    LocalBench(const LocalBench&) = delete;
    LocalBench& operator=(const LocalBench&) = delete;

    // Every wanted scenario in order, each printed as it ends; the document `--json` writes.
    boost::json::object run();

  private:
    // Baselines, each sample also kept for the run-wide figures.
    double sample_spawn();
    std::optional<double> sample_bwrap();
    void sample_unshare();

    boost::json::object scenario(const std::string& name, const std::string& baseline,
                                 const std::vector<double>& ours, const std::vector<double>& base);
    void print(const boost::json::object& s);
    static void settle();

    SandboxKey warm_key() const;
    std::shared_ptr<Sandbox> warm_sandbox();

    // exec_scenarios.cpp
    boost::json::object exec_true();
    boost::json::object exec_true_spaced();
    boost::json::object warm_acquire();
    boost::json::object cold_acquire();
    boost::json::object cold_acquire_pooled();
    boost::json::object exec_output();
    boost::json::object exec_stream_first_byte();
    boost::json::object files(std::size_t size, int samples, const std::string& label);

    // churn_scenarios.cpp
    Footprint leftovers(const std::set<std::string>& ids) const;
    boost::json::object churn();
    boost::json::object churn_parallel();

    // cli_scenarios.cpp
    std::vector<boost::json::object> cli();
    void wait_for_shared_pool();
    // The `maf-sandbox` front end next to this executable ("" when this one cannot be found),
    // and one whole-process sample of it (an error when it fails).
    std::string front_end() const;
    double time_front_end(const std::vector<std::string>& argv);

    // peer_scenarios.cpp
    std::vector<boost::json::object> peers();

    Plan plan_;
    std::vector<std::string> only_;
    std::shared_ptr<spdlog::logger> log_;
    std::filesystem::path state_dir_;
    std::unique_ptr<local::LocalBackend> backend_;
    std::vector<std::string> env_strings_;
    std::vector<char*> child_env_;
    std::string self_;
    std::optional<std::string> bwrap_, unshare_;
    std::vector<double> all_spawn_, all_bwrap_, all_unshare_;
};

// What every local scenario asks for: exec and files both ways, at `scope`.
SandboxSpec bench_spec(IsolationScope scope);

// `argv` with at most `max_output` bytes of output kept.
ExecRequest command_request(Argv argv, std::uint64_t max_output = 1u << 20);

// The front end's unpooled one-shot `run -- /bin/true`, and its warm `exec -- /bin/true` at the
// bench's scope and `thread`, as a user types them.
std::vector<std::string> front_end_run_true(const std::string& front);
std::vector<std::string> front_end_exec_true(const std::string& front, const std::string& thread);

// The elementwise sums of two sample series (a write and its read back), as long as the shorter.
std::vector<double> sum_pairs(const std::vector<double>& a, const std::vector<double>& b);

}  // namespace maf_sandbox::bench
