// Reading what the host's memory is spent on, for the bench's density scenario: /proc/meminfo,
// the anonymous memory of processes outside sandboxes, and the processes and memory cgroups of
// given sandboxes. Linux only; nothing here changes the system.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>

#include <boost/json.hpp>

namespace maf_sandbox::bench {

// /proc/meminfo, in bytes per field ("MemAvailable", "Slab", ...).
using MemInfo = std::map<std::string, std::uint64_t>;
MemInfo read_meminfo();

// The field `key` of `info`. Throws SystemError when the kernel does not report it.
std::uint64_t meminfo_field(const MemInfo& info, const std::string& key);

// MemAvailable plus the anonymous memory (RssAnon) of every process that is in no maf-sbx-*
// cgroup plus Shmem (tmpfs pages: other sandboxes' files, a test's RAM disk). Another process
// allocating or freeing anonymous memory (a compiler, on a shared machine) or filling a tmpfs
// moves MemAvailable and the correction by the same amount, so the difference of two readings is
// what the kernel and the measured sandboxes' processes spent, with most of the noise of other
// work taken out. (Idle sandboxes hold almost no Shmem: a few generated files in /etc.)
struct MemoryReading {
    std::uint64_t available = 0;
    std::uint64_t others_anon = 0;
    std::uint64_t shmem = 0;
    std::uint64_t corrected() const { return available + others_anon + shmem; }
};
MemoryReading read_memory();

// What the given sandboxes (ids, as in their maf-sbx-<id> cgroups) hold right now.
struct SandboxMemory {
    std::size_t sandboxes_found = 0;
    std::size_t processes = 0;
    std::uint64_t pss_kib = 0;      // /proc/<pid>/smaps_rollup of every process in their cgroups
    std::uint64_t memcg_bytes = 0;  // their memory cgroups' usage (user and kernel pages charged)
    boost::json::array sample;      // one sandbox's processes with Rss, Pss and Private_Dirty
};
SandboxMemory read_sandbox_memory(const std::set<std::string>& ids);

}  // namespace maf_sandbox::bench
