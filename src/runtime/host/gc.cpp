#include "maf_sandbox/runtime/host/gc.hpp"

#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <thread>

#include "../kernel/fd_ops.hpp"
#include "maf_sandbox/core/errors.hpp"
#include "maf_sandbox/runtime/host/images.hpp"
#include "maf_sandbox/runtime/host/recorded_handle.hpp"
#include "maf_sandbox/runtime/kernel/cgroup.hpp"
#include "maf_sandbox/runtime/wire/id_claims.hpp"
#include "maf_sandbox/runtime/wire/owner.hpp"

namespace maf_sandbox::runtime {

namespace fs = std::filesystem;

namespace {

bool older_than(const fs::path& path, std::chrono::seconds age) {
    struct stat st {};
    if (::lstat(path.c_str(), &st) != 0) {
        return false;
    }
    return std::chrono::system_clock::now() - std::chrono::system_clock::from_time_t(st.st_mtime) >=
           age;
}

}  // namespace

GcReport reconcile(Registry& registry, const GcOptions& options) {
    GcReport report;
    const auto cleanup = options.cleanup ? options.cleanup : CleanupHook(remove_recorded_cgroups);
    const auto now = Clock::now();
    for (const auto& record : registry.list()) {
        ++report.examined;
        // A one-shot sandbox whose owner is gone is reclaimed even while its supervisor runs:
        // its owner watch did not get to it (stopped, killed, or the host restarted).
        const bool orphaned = owner_gone(record);
        if (Registry::is_alive(record) && !orphaned) {
            ++report.alive;
            continue;
        }
        if (!orphaned && record.supervisor.pid == 0 &&
            now - record.created_at < options.creating_grace) {
            ++report.alive;  // a create in progress in some process
            continue;
        }
        try {
            cleanup(record);
            release_recorded_ids(record);
            registry.remove(record.id);
            ++report.reclaimed;
            report.reclaimed_ids.push_back(record.id);
        } catch (const std::exception& e) {
            ++report.failed;
            report.errors.push_back(fmt::format("sandbox {}: {}", record.id, e.what()));
        }
    }
    // Directories without a readable record: a crash between mkdir and the first record write, or
    // between removing a record and its directory.
    std::error_code error;
    for (const auto& entry : fs::directory_iterator(registry.state_dir() / "sandboxes", error)) {
        const auto name = entry.path().filename().string();
        try {
            Registry::validate_id(name);
        } catch (const InvalidArgument&) {
            continue;  // not ours
        }
        if (registry.get(name) || !older_than(entry.path(), options.creating_grace)) {
            continue;
        }
        try {
            // Its supervisor may still run (the creator died after starting it): it goes first,
            // or it would outlive the directory it serves from.
            destroy_cgroups_named_for(name);
            registry.remove(name);
            ++report.orphan_dirs_removed;
        } catch (const std::exception& e) {
            ++report.failed;
            report.errors.push_back(fmt::format("orphan directory {}: {}", name, e.what()));
        }
    }
    if (options.reclaim_stale_ids) {
        try {
            const IdClaims claims(options.id_claims_dir.empty() ? default_id_claims_dir()
                                                                : options.id_claims_dir);
            // A claim nobody holds is of a sandbox whose PID 1 is gone; its egress helpers may
            // still be ending, so its cgroups are emptied before its ids can be handed out again.
            const auto reclaimed = claims.reclaim_stale([](const std::string& id) {
                if (Registry::is_id(id)) {
                    destroy_cgroups_named_for(id);
                }
            });
            report.id_claims_reclaimed = static_cast<int>(reclaimed.size());
        } catch (const std::exception& e) {
            ++report.failed;
            report.errors.push_back(fmt::format("host id claims: {}", e.what()));
        }
    }
    if (options.sweep_images) {
        try {
            const auto swept = ImageStore(registry.state_dir()).sweep();
            report.image_leftovers_removed = swept.imports_removed + swept.removals_resumed;
            for (const auto& error : swept.errors) {
                ++report.failed;
                report.errors.push_back(fmt::format("image store: {}", error));
            }
        } catch (const std::exception& e) {
            ++report.failed;
            report.errors.push_back(fmt::format("image store: {}", e.what()));
        }
    }
    return report;
}

}  // namespace maf_sandbox::runtime
