// Reconciliation after crashes: removes what dead sandboxes left behind, touching only what is
// recorded under its own registry's state directory (two state directories never disturb each
// other).
#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "maf_sandbox/runtime/wire/record_cgroups.hpp"
#include "maf_sandbox/runtime/wire/registry.hpp"

namespace maf_sandbox::runtime {

// Tears down a dead sandbox's kernel objects (cgroups, mounts) from its record's `runtime` blob.
// Throws to report a failure; the record is then kept for the next run.
using CleanupHook = std::function<void(const SandboxRecord&)>;

struct GcOptions {
    // Runs before the directory and the record are removed; defaults to remove_recorded_cgroups.
    CleanupHook cleanup;
    // A record without a supervisor (pid 0) younger than this is a create in progress: kept.
    std::chrono::seconds creating_grace{60};
    // The host-wide claim table whose claims nobody holds any more (sandboxes of any state
    // directory that are gone, whatever killed them) are reclaimed, after whatever still runs in
    // their cgroups is killed. Empty: default_id_claims_dir(). Off: reclaim_stale_ids = false.
    std::filesystem::path id_claims_dir;
    bool reclaim_stale_ids = true;
    // The image store's leftovers of imports and removals whose process is gone (ImageStore::
    // sweep) are removed too.
    bool sweep_images = true;
};

struct GcReport {
    int examined = 0;
    int alive = 0;
    int reclaimed = 0;                // dead records removed with their leftovers
    int orphan_dirs_removed = 0;      // sandbox directories without a record
    int id_claims_reclaimed = 0;      // host id claims of sandboxes that are gone
    int image_leftovers_removed = 0;  // `.import-*` and `.remove-*` nobody holds
    int failed = 0;
    std::vector<std::string> reclaimed_ids;
    std::vector<std::string> errors;  // one sentence per failure, for logs
};

// For every record whose supervisor is dead (or whose pid was reused), and every one-shot record
// whose owner is gone (owner.hpp) even while its supervisor runs, runs the cleanup (which kills
// what still runs in the sandbox's cgroups), then removes the sandbox directory and the record.
// Never throws for one sandbox's failure: it is counted and described in the report.
GcReport reconcile(Registry& registry, const GcOptions& options = {});

}  // namespace maf_sandbox::runtime
