// The `density` scenario of `maf-sandbox bench`: how many idle sandboxes one host holds
// at once, and what each costs in host memory beyond its workload.
#pragma once

#include <cstddef>
#include <functional>
#include <set>
#include <string>

#include <spdlog/logger.h>
#include <boost/json.hpp>

#include "maf_sandbox/local/local_backend.hpp"

namespace maf_sandbox::bench {

// What the scenario's own sandboxes left behind after disposal (the bench's churn leak check).
struct DensityLeaks {
    std::size_t sandbox_dirs = 0;
    std::size_t cgroups = 0;
    std::size_t records = 0;
};
using DensityLeakCheck = std::function<DensityLeaks(const std::set<std::string>& ids)>;

// Creates up to `sandboxes` idle sandboxes through `backend` (host image, closed egress, one
// conversation key each), all alive at once; measures host memory per sandbox by the drop of
// MemAvailable and by the Pss of their processes and their memory cgroups' usage; disposes them
// all and counts leftovers with `leftovers`. A create that fails stops the creating (the figures
// are then for the sandboxes made, and `stopped_by` says why); it never throws for that, and
// every sandbox made is disposed whatever happens. Returns the scenario's JSON object (name
// `density`; fields in BENCHMARKS.md).
boost::json::object density_scenario(local::LocalBackend& backend, int sandboxes,
                                     const DensityLeakCheck& leftovers, spdlog::logger& log);

}  // namespace maf_sandbox::bench
