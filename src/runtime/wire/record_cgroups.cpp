// Removing what a sandbox record names (its cgroups, its host id claim): the host's gc and the
// supervisor's owner watch (which disposes of a sandbox whose owner ended) both do it, from the
// same record.
#include "maf_sandbox/runtime/wire/record_cgroups.hpp"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <thread>

#include <fmt/format.h>

#include "maf_sandbox/core/errors.hpp"
#include "maf_sandbox/runtime/kernel/cgroup.hpp"
#include "maf_sandbox/runtime/kernel/sandbox_cgroup_names.hpp"
#include "maf_sandbox/runtime/wire/id_claims.hpp"

namespace maf_sandbox::runtime {

namespace fs = std::filesystem;

namespace {

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
        const fs::path path(std::string(item.get_string()));
        // Only this sandbox's own cgroups: a damaged or forged record must never make gc rmdir
        // anything else.
        if (is_sandbox_cgroup(path, record.id)) {
            dirs.push_back(path.string());
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

void release_recorded_ids(const SandboxRecord& record) {
    // The table a record names is not made if missing: a record must not make root create a
    // directory wherever it says (and there is nothing to release in a table that is not there).
    std::error_code ec;
    if (record.host_ids && !record.host_ids->claims_dir.empty() &&
        fs::is_directory(record.host_ids->claims_dir, ec)) {
        IdClaims(record.host_ids->claims_dir).release(record.host_ids->base, record.id);
    }
}

}  // namespace maf_sandbox::runtime
