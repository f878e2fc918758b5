#include "maf_sandbox/runtime/gc.hpp"

#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <thread>

#include "fd_ops.hpp"
#include "maf_sandbox/core/errors.hpp"
#include "maf_sandbox/runtime/cgroup.hpp"
#include "maf_sandbox/runtime/id_claims.hpp"
#include "maf_sandbox/runtime/owner.hpp"

namespace maf_sandbox::runtime {

namespace fs = std::filesystem;

namespace {

constexpr std::string_view kCgroupPrefix = "/sys/fs/cgroup/";

bool older_than(const fs::path& path, std::chrono::seconds age) {
    struct stat st {};
    if (::lstat(path.c_str(), &st) != 0) {
        return false;
    }
    return std::chrono::system_clock::now() - std::chrono::system_clock::from_time_t(st.st_mtime) >=
           age;
}

// Every cgroup directory called `name` under /sys/fs/cgroup (v1 hierarchies and v2 alike; a few
// hundred directories on a typical host), links skipped so no directory is found twice.
std::vector<fs::path> cgroups_named(const std::string& name) {
    std::vector<fs::path> found;
    std::error_code ec;
    fs::recursive_directory_iterator it(kCgroupRoot, fs::directory_options::skip_permission_denied,
                                        ec);
    for (const fs::recursive_directory_iterator end; !ec && it != end; it.increment(ec)) {
        if (it->is_symlink(ec) || !it->is_directory(ec)) {
            it.disable_recursion_pending();
            continue;
        }
        if (it->path().filename() == name) {
            found.push_back(it->path());
            it.disable_recursion_pending();
        }
    }
    return found;
}

}  // namespace

// A creator killed after making the sandbox's cgroups but before recording them (or before
// writing any record) leaves a running supervisor in cgroups no record names. They are found by
// their name, maf-sbx-<id>, which no other sandbox can have (the id is 128 random bits), and
// everything in them is killed before they are removed.
void destroy_cgroups_named_for(const std::string& id) {
    if (!Registry::is_id(id)) {
        return;  // a name built from it could reach outside the sandbox's own cgroups
    }
    if (auto named = cgroups_named(fmt::format("maf-sbx-{}", id)); !named.empty()) {
        SandboxCgroup::attach(detect_cgroup_layout(), std::move(named))->destroy();
    }
}

void release_recorded_ids(const SandboxRecord& record) {
    if (record.host_ids && !record.host_ids->claims_dir.empty()) {
        IdClaims(record.host_ids->claims_dir).release(record.host_ids->base, record.id);
    }
}

void remove_recorded_cgroups(const SandboxRecord& record) {
    destroy_cgroups_named_for(record.id);
    const auto* paths = record.runtime.if_contains("cgroup_paths");
    if (paths == nullptr || !paths->is_array()) {
        return;
    }
    std::vector<std::string> dirs;
    for (const auto& item : paths->get_array()) {
        if (!item.is_string()) {
            continue;
        }
        const auto path = fs::path(std::string(item.get_string())).lexically_normal().string();
        // Only cgroups: a damaged record must never make gc rmdir anything else.
        if (path.starts_with(kCgroupPrefix) && path.find("/../") == std::string::npos) {
            dirs.push_back(path);
        }
    }
    // Children before parents.
    std::sort(dirs.begin(), dirs.end(),
              [](const std::string& a, const std::string& b) { return a.size() > b.size(); });
    for (const auto& dir : dirs) {
        // A cgroup whose last process just died can stay busy for a moment.
        for (int attempt = 0;; ++attempt) {
            if (::rmdir(dir.c_str()) == 0 || errno == ENOENT) {
                break;
            }
            if (errno != EBUSY || attempt >= 50) {
                throw SystemError(errno,
                                  fmt::format("removing cgroup '{}' of sandbox {}", dir, record.id),
                                  "a process may still be in it; kill it and run `maf-sandbox gc` "
                                  "again");
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
        }
    }
}

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
    return report;
}

}  // namespace maf_sandbox::runtime
