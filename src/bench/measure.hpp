// What every scenario of `maf-sandbox bench` measures with: wall-clock samples in milliseconds,
// their percentiles in the JSON shape BENCHMARKS.md documents, and the baselines' child processes.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <boost/json.hpp>

namespace maf_sandbox::bench {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point start);

struct Stats {
    std::size_t n = 0;
    double p50 = 0, p95 = 0, p99 = 0, mean = 0, min = 0, max = 0;
};

// Nearest-rank percentiles: p99 of 100 samples is the largest but one, never an interpolation.
Stats stats_of(std::vector<double> samples);

// {"n", "p50_ms", "p95_ms", "p99_ms", "mean_ms", "min_ms", "max_ms"}.
boost::json::object to_json(const Stats& stats);

struct Spawned {
    int status = -1;
    std::uint64_t stdout_bytes = 0;
    // From the spawn to the first byte read from its stdout (captured only; -1 when none came).
    double first_byte_ms = -1;
};

// posix_spawn + wait; stdout is read (and counted) when `capture`, else it goes to /dev/null;
// stderr goes to /dev/null, or to the file `stderr_file` (created or emptied) when one is named;
// stdin is /dev/null. `argv[0]` is a path (no PATH search: the baseline must not pay for one).
Spawned spawn_and_wait(const std::vector<std::string>& argv, char** envp, bool capture = false,
                       const char* stderr_file = nullptr);

// The first executable `name` in the usual system directories.
std::optional<std::string> find_program(const std::string& name);

// FNV-1a of `bytes`: a cheap checksum of what a file came back as.
std::uint64_t fnv1a(std::string_view bytes);

// `size` pseudo-random (incompressible) bytes, the same for the same seed.
std::string random_bytes(std::size_t size, std::uint32_t seed);

}  // namespace maf_sandbox::bench
