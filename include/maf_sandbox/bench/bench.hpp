// `maf-sandbox bench`: the local backend (and, through an acas-emulator, the ACAS backend) measured
// next to the kernel's floor (posix_spawn, unshare) and bubblewrap in one run. The harness is its
// own module so that the product's CLI only parses the flags and prints where the JSON went;
// BENCHMARKS.md has the scenarios, the JSON schema and the figures of record.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <spdlog/logger.h>
#include <boost/json.hpp>

namespace maf_sandbox::bench {

struct BenchOptions {
    bool quick = false;  // a short run for CI, instead of the figures of record
    // Run only the scenarios whose names start with one of these (all when empty).
    std::vector<std::string> only;
};

// Runs every wanted scenario, printing each to stdout as it ends, and returns the whole run as
// the `maf-sandbox-bench/1` JSON document. Its sandboxes and temporary state are gone when this
// returns or throws.
boost::json::object run_bench(const BenchOptions& options, std::shared_ptr<spdlog::logger> log);

}  // namespace maf_sandbox::bench
