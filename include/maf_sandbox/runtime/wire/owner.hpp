// The owner of a one-shot sandbox: the front-end process whose death ends the sandbox. A sandbox
// made for one call (`maf-sandbox run`, a call-scoped acquire) records its owner, as a pid plus
// that pid's start time so a reused pid is never mistaken for it, in its supervisor's config and
// in its registry record (runtime["owner"]). The supervisor's host-side watcher (owner_watch.hpp)
// holds a pidfd on the owner and disposes the sandbox within moments of the owner's end, whatever
// ended it; gc reclaims a one-shot sandbox whose recorded owner is gone when no watcher did.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include <boost/json/object.hpp>

namespace maf_sandbox::runtime {

struct SandboxRecord;  // registry.hpp

struct SandboxOwner {
    pid_t pid = 0;
    std::uint64_t start_time = 0;  // field 22 of /proc/<pid>/stat
    bool operator==(const SandboxOwner&) const = default;
};

// The calling process as an owner. Throws SystemError when its own start time cannot be read.
SandboxOwner current_process_as_owner();

// True while the process exists, is not a zombie and has the recorded start time.
bool owner_alive(const SandboxOwner& owner);

boost::json::object to_json(const SandboxOwner& owner);
// nullopt for anything that is not {pid, start_time} with a positive pid.
std::optional<SandboxOwner> owner_from_json(const boost::json::value& json);

// The owner a record names first (runtime["owner"]), if any.
std::optional<SandboxOwner> recorded_owner(const SandboxRecord& record);
// Makes `owner` the record's one owner.
void set_recorded_owner(SandboxRecord& record, const SandboxOwner& owner);

// Co-owners: every front end that uses a sandbox it should not outlive (an MCP server that
// reuses one by key, two servers sharing a key) records itself, and the sandbox ends when the
// last of them has ended, never while one still runs. The list is runtime["owners"], with its
// first entry mirrored in runtime["owner"] for readers that know one owner only.
inline constexpr std::size_t kMaxOwners = 16;
// Every owner the record names, the first one first, each once.
std::vector<SandboxOwner> recorded_owners(const SandboxRecord& record);
// Adds `owner` (when not named yet), dropping owners that no longer run. False, leaving the record
// as it was, when kMaxOwners live owners are named already.
bool add_recorded_owner(SandboxRecord& record, const SandboxOwner& owner);
// Removes `owner` from the record's owners (and the owners that no longer run). Returns how many
// live owners remain.
std::size_t remove_recorded_owner(SandboxRecord& record, const SandboxOwner& owner);

// A one-shot sandbox whose owners are gone: it records at least one owner and none still runs.
bool owner_gone(const SandboxRecord& record);

}  // namespace maf_sandbox::runtime
