// The `density` scenario of `maf-sandbox bench`: how many idle sandboxes one host holds at once,
// and what each costs in host memory beyond its workload (the target is in BENCHMARKS.md).
//
// Several measures, because none is exact alone on a shared machine. The drop of MemAvailable sees
// everything the kernel spends (namespaces, cgroups, page tables, slab) but also whatever else
// runs meanwhile: a compiler moves it by half a gigabyte in a second, another bench's 1 GiB tmpfs
// file by a gigabyte. So the figure of record corrects it by other processes' anonymous memory and
// by Shmem (host_memory.hpp), each end being the median of several readings (a reading is not
// atomic: a compiler growing during the /proc scan skews one); the raw drop and what was not given
// back after disposal are reported next to it, as its noise. The Pss of the sandboxes' processes
// (their user-space pages, shared ones split fairly) plus the kernel's own accounts (slab, kernel
// stacks, page tables, per-cpu) cross-check it, and the memory cgroups' usage is what the kernel
// charged to the sandboxes.
#include "density.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "host_memory.hpp"
#include "maf_sandbox/core/run_blocking.hpp"
#include "maf_sandbox/core/types.hpp"
#include "measure.hpp"

namespace maf_sandbox::bench {

namespace {

namespace fs = std::filesystem;
namespace json = boost::json;
// The scope label of every density sandbox: one list finds them all.
constexpr const char* kScope = "bench-density";
// Creating stops before MemAvailable falls below this: the machine is shared.
constexpr std::uint64_t kMemAvailableFloor = 2ull << 30;
// Before the first reading and after the last create (and after teardown): the previous work's
// disposals and the spare exec handlers finish, the kernel frees namespaces in its workers.
constexpr auto kSettle = std::chrono::seconds(2);
constexpr double kMiB = 1024.0 * 1024.0;
// Readings per measuring point, and the time between them.
constexpr int kReadings = 5;
constexpr auto kReadingGap = std::chrono::milliseconds(200);
// The kernel's accounts that no process's Pss shows (Shmem is left out: idle sandboxes hold next
// to none, and other work's tmpfs files would swamp it).
constexpr const char* kKernelFields[] = {"Slab", "KernelStack", "PageTables", "Percpu"};
constexpr const char* kReportedFields[] = {"AnonPages",    "Shmem",      "Slab",
                                           "SReclaimable", "SUnreclaim", "KernelStack",
                                           "PageTables",   "Percpu",     "Cached"};

double mib(double bytes) {
    return bytes / kMiB;
}

double difference(std::uint64_t before, std::uint64_t after) {
    return static_cast<double>(before) - static_cast<double>(after);
}

std::optional<std::string> read_line(const char* path) {
    std::ifstream in(path);
    std::string line;
    if (std::getline(in, line)) {
        return line;
    }
    return std::nullopt;
}

json::object kernel_limits() {
    json::object limits;
    for (const char* path : {"/proc/sys/user/max_user_namespaces", "/proc/sys/kernel/pid_max",
                             "/proc/sys/kernel/threads-max"}) {
        if (const auto value = read_line(path)) {
            limits[fs::path(path).filename().string()] = *value;
        }
    }
    return limits;
}

// Disposes every density sandbox of the backend, whatever happened before: runs on scope exit.
class Teardown {
  public:
    Teardown(local::LocalBackend& backend, spdlog::logger& log) : backend_(backend), log_(log) {}
    Teardown(const Teardown&) = delete;
    Teardown& operator=(const Teardown&) = delete;
    ~Teardown() { run(); }

    // Returns the seconds it took. Never throws: a sandbox that will not go is logged.
    double run() noexcept {
        const auto start = Clock::now();
        // Twice: a sandbox whose removal failed once (a cgroup still settling) gets a second try.
        for (int round = 0; round < 2; ++round) {
            try {
                for (const auto& info : backend_.list({fmt::format("scope={}", kScope)})) {
                    try {
                        backend_.remove(info.id);
                    } catch (const std::exception& e) {
                        log_.warn("density: removing sandbox {}: {}", info.id, e.what());
                    }
                }
            } catch (const std::exception& e) {
                log_.warn("density: listing the density sandboxes: {}", e.what());
            }
        }
        return ms_since(start) / 1000.0;
    }

  private:
    local::LocalBackend& backend_;
    spdlog::logger& log_;
};

SandboxSpec density_spec() {
    SandboxSpecFields fields;
    fields.kind = "bench";
    fields.isolation_scope = IsolationScope::conversation;
    fields.egress = Egress::closed;
    return SandboxSpec(fields);
}

struct Creation {
    std::vector<double> create_ms;
    std::string stopped_by;
    double seconds = 0;
};

Creation create_all(local::LocalBackend& backend, int sandboxes, spdlog::logger& log) {
    Creation out;
    const SandboxSpec spec = density_spec();
    const auto started = Clock::now();
    for (int i = 0; i < sandboxes; ++i) {
        if (meminfo_field(read_meminfo(), "MemAvailable") < kMemAvailableFloor) {
            out.stopped_by = fmt::format("MemAvailable fell below {} MiB (the machine is shared)",
                                         kMemAvailableFloor >> 20);
            break;
        }
        const SandboxKey key{kScope, fmt::format("thread-{}", i), "bench", ""};
        const auto start = Clock::now();
        try {
            run_blocking(backend.acquire(key, spec));  // the handle goes; the sandbox stays
        } catch (const std::exception& e) {
            out.stopped_by = fmt::format("sandbox {} could not be created: {}", i + 1, e.what());
            log.warn("density: {}; stopping at {} sandboxes", out.stopped_by, i);
            break;
        }
        out.create_ms.push_back(ms_since(start));
    }
    out.seconds = ms_since(started) / 1000.0;
    return out;
}

// After kSettle, the median (by the corrected figure) of kReadings readings.
MemoryReading settled_reading() {
    std::this_thread::sleep_for(kSettle);
    std::vector<MemoryReading> readings;
    for (int i = 0; i < kReadings; ++i) {
        if (i > 0) {
            std::this_thread::sleep_for(kReadingGap);
        }
        readings.push_back(read_memory());
    }
    std::sort(readings.begin(), readings.end(),
              [](const auto& a, const auto& b) { return a.corrected() < b.corrected(); });
    return readings[readings.size() / 2];
}

}  // namespace

json::object density_scenario(local::LocalBackend& backend, int sandboxes,
                              const DensityLeakCheck& leftovers, spdlog::logger& log) {
    Teardown teardown(backend, log);
    const MemoryReading before = settled_reading();
    const MemInfo info_before = read_meminfo();

    const Creation creation = create_all(backend, sandboxes, log);
    const std::size_t created = creation.create_ms.size();
    const MemoryReading during = settled_reading();
    const MemInfo info_during = read_meminfo();
    std::set<std::string> ids;
    for (const auto& info : backend.list({fmt::format("scope={}", kScope)})) {
        ids.insert(info.id);
    }
    const SandboxMemory held = read_sandbox_memory(ids);

    const double dispose_seconds = teardown.run();
    const MemoryReading after = settled_reading();
    const DensityLeaks left = leftovers(ids);

    const double count = std::max<double>(1.0, static_cast<double>(created));
    const double corrected = mib(difference(before.corrected(), during.corrected())) / count;
    const double raw = mib(difference(before.available, during.available)) / count;
    const double pss = static_cast<double>(held.pss_kib) / 1024.0 / count;
    json::object kernel_delta;
    for (const char* key : kReportedFields) {
        const auto b = info_before.find(key);
        const auto a = info_during.find(key);
        if (b != info_before.end() && a != info_during.end()) {
            kernel_delta[key] = mib(difference(a->second, b->second)) / count;
        }
    }
    double kernel = 0;
    for (const char* key : kKernelFields) {
        if (const auto* value = kernel_delta.if_contains(key)) {
            kernel += value->to_number<double>();
        }
    }
    const double memcg = mib(static_cast<double>(held.memcg_bytes)) / count;

    json::object out{
        {"name", "density"},
        {"stats", to_json(stats_of(creation.create_ms))},  // per create, for the common printout
        {"baseline", nullptr},
        {"baseline_stats", nullptr},
        {"sandboxes", sandboxes},
        {"created", created},
        {"stopped_by",
         creation.stopped_by.empty() ? json::value(nullptr) : json::value(creation.stopped_by)},
        {"processes_per_sandbox", static_cast<double>(held.processes) / count},
        {"mib_per_sandbox_memavailable", corrected},
        {"mib_per_sandbox_memavailable_raw", raw},
        {"mib_not_returned_after_dispose",
         json::object{{"raw", mib(difference(before.available, after.available))},
                      {"corrected", mib(difference(before.corrected(), after.corrected()))}}},
        {"mib_per_sandbox_pss", pss},
        {"mib_per_sandbox_pss_plus_kernel", pss + kernel},
        {"mib_per_sandbox_memcg", memcg},
        {"meminfo_mib_per_sandbox", std::move(kernel_delta)},
        {"sample_sandbox_processes", held.sample},
        {"create_seconds", creation.seconds},
        {"dispose_seconds", dispose_seconds},
        {"leaked", json::object{{"sandbox_dirs", left.sandbox_dirs},
                                {"cgroups", left.cgroups},
                                {"records", left.records}}},
        {"kernel_limits", kernel_limits()}};
    std::cout << fmt::format(
        "  density: {} of {} idle sandboxes at once ({:.1f} s to create); per sandbox {:.2f} MiB "
        "by MemAvailable corrected for other work (raw {:.2f}), {:.2f} MiB Pss of {:.1f} "
        "processes, {:.2f} MiB Pss + kernel, {:.2f} MiB memory "
        "cgroup; leaked dirs {} cgroups {} records {}{}\n",
        created, sandboxes, creation.seconds, corrected, raw, pss,
        static_cast<double>(held.processes) / count, pss + kernel, memcg, left.sandbox_dirs,
        left.cgroups, left.records,
        creation.stopped_by.empty() ? "" : "; stopped: " + creation.stopped_by);
    return out;
}

}  // namespace maf_sandbox::bench
