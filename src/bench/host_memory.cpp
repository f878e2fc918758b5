// Reading where host memory goes, for the bench's density scenario (host_memory.hpp).
#include "host_memory.hpp"

#include <sys/types.h>

#include <cerrno>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <vector>

#include <fmt/format.h>

#include "maf_sandbox/core/errors.hpp"

namespace maf_sandbox::bench {

namespace {

namespace fs = std::filesystem;
namespace json = boost::json;

constexpr const char* kCgroupRoot = "/sys/fs/cgroup";
constexpr std::string_view kSandboxCgroupPrefix = "maf-sbx-";
// maf-sbx-<id> directories sit beneath the creating process's own cgroup in each hierarchy.
constexpr int kCgroupWalkDepth = 4;

// "Key:   123 kB" lines (meminfo, status, smaps_rollup) as bytes per key.
std::map<std::string, std::uint64_t> read_kib_fields(const fs::path& file) {
    std::map<std::string, std::uint64_t> out;
    std::ifstream in(file);
    std::string line;
    while (std::getline(in, line)) {
        std::istringstream fields(line);
        std::string key;
        std::uint64_t kib = 0;
        if (fields >> key >> kib && key.ends_with(':')) {
            out[key.substr(0, key.size() - 1)] = kib * 1024;
        }
    }
    return out;
}

// A /proc file whose process may exit mid-read: streaming the buffer (unlike an
// istreambuf_iterator) turns that read error into a short result instead of an exception.
std::string read_text(const fs::path& file) {
    std::ifstream in(file);
    std::ostringstream text;
    text << in.rdbuf();
    return text.str();
}

bool all_digits(const std::string& name) {
    return !name.empty() && name.find_first_not_of("0123456789") == std::string::npos;
}

// Every maf-sbx-<id> directory under the cgroup mount points, per id (one walk for all ids).
std::map<std::string, std::vector<fs::path>> sandbox_cgroups(const std::set<std::string>& ids) {
    std::map<std::string, std::vector<fs::path>> out;
    std::error_code ec;
    for (fs::recursive_directory_iterator
             it(kCgroupRoot, fs::directory_options::skip_permission_denied, ec),
         end;
         !ec && it != end; it.increment(ec)) {
        if (it.depth() > kCgroupWalkDepth) {
            it.disable_recursion_pending();
            continue;
        }
        const auto name = it->path().filename().string();
        if (name.starts_with(kSandboxCgroupPrefix)) {
            if (const auto id = name.substr(kSandboxCgroupPrefix.size()); ids.count(id) > 0) {
                out[id].push_back(it->path());
            }
            it.disable_recursion_pending();
        }
    }
    return out;
}

// The pids (host's view) in `dir` and its child cgroups (the per-exec ones).
void collect_pids(const fs::path& dir, std::set<pid_t>& pids) {
    std::ifstream in(dir / "cgroup.procs");
    pid_t pid = 0;
    while (in >> pid) {
        pids.insert(pid);
    }
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator(dir, ec)) {
        if (entry.is_directory(ec)) {
            collect_pids(entry.path(), pids);
        }
    }
}

// A memory cgroup's usage, its children included (v1 usage_in_bytes, v2 memory.current); 0 for a
// directory of another controller.
std::uint64_t memcg_usage(const fs::path& dir) {
    for (const char* file : {"memory.usage_in_bytes", "memory.current"}) {
        std::ifstream in(dir / file);
        std::uint64_t bytes = 0;
        if (in >> bytes) {
            return bytes;
        }
    }
    return 0;
}

}  // namespace

MemInfo read_meminfo() {
    return read_kib_fields("/proc/meminfo");
}

std::uint64_t meminfo_field(const MemInfo& info, const std::string& key) {
    const auto it = info.find(key);
    if (it == info.end()) {
        throw SystemError(ENOENT, fmt::format("reading {} from /proc/meminfo", key),
                          "run on Linux 4.14 or later with /proc mounted");
    }
    return it->second;
}

MemoryReading read_memory() {
    MemoryReading reading;
    const MemInfo info = read_meminfo();
    reading.available = meminfo_field(info, "MemAvailable");
    reading.shmem = meminfo_field(info, "Shmem");
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator("/proc", ec)) {
        if (!all_digits(entry.path().filename().string())) {
            continue;
        }
        if (read_text(entry.path() / "cgroup")
                .find(std::string("/") + std::string(kSandboxCgroupPrefix)) != std::string::npos) {
            continue;  // a sandbox's process: what is being measured, not noise
        }
        const auto status = read_kib_fields(entry.path() / "status");
        if (const auto it = status.find("RssAnon"); it != status.end()) {
            reading.others_anon += it->second;
        }
    }
    return reading;
}

SandboxMemory read_sandbox_memory(const std::set<std::string>& ids) {
    SandboxMemory held;
    bool sampled = false;
    for (const auto& [id, dirs] : sandbox_cgroups(ids)) {
        ++held.sandboxes_found;
        std::set<pid_t> pids;
        for (const auto& dir : dirs) {
            collect_pids(dir, pids);
            held.memcg_bytes += memcg_usage(dir);
        }
        held.processes += pids.size();
        for (const pid_t pid : pids) {
            const fs::path proc = fmt::format("/proc/{}", pid);
            const auto rollup = read_kib_fields(proc / "smaps_rollup");
            const auto kib = [&](const char* key) {
                const auto it = rollup.find(key);
                return it == rollup.end() ? std::uint64_t{0} : it->second / 1024;
            };
            held.pss_kib += kib("Pss");
            if (!sampled) {
                auto comm = read_text(proc / "comm");
                if (!comm.empty() && comm.back() == '\n') {
                    comm.pop_back();
                }
                held.sample.emplace_back(json::object{{"comm", comm},
                                                      {"rss_kib", kib("Rss")},
                                                      {"pss_kib", kib("Pss")},
                                                      {"pss_anon_kib", kib("Pss_Anon")},
                                                      {"pss_file_kib", kib("Pss_File")},
                                                      {"private_dirty_kib", kib("Private_Dirty")}});
            }
        }
        sampled = sampled || !pids.empty();
    }
    return held;
}

}  // namespace maf_sandbox::bench
