// The owner of a one-shot sandbox: the front-end process whose death ends the sandbox. A sandbox
// made for one call (`maf-sandbox run`, a call-scoped acquire) records its owner, as a pid plus
// that pid's start time so a reused pid is never mistaken for it, in its supervisor's config and
// in its registry record (runtime["owner"]). The supervisor's host-side watcher (owner_watch.hpp)
// holds a pidfd on the owner and disposes the sandbox within moments of the owner's end, whatever
// ended it; gc reclaims a one-shot sandbox whose recorded owner is gone when no watcher did.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>

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

// The owner a record names (runtime["owner"]), if any.
std::optional<SandboxOwner> recorded_owner(const SandboxRecord& record);
void set_recorded_owner(SandboxRecord& record, const SandboxOwner& owner);

// A one-shot sandbox whose owner is gone: it records an owner and that owner no longer runs.
bool owner_gone(const SandboxRecord& record);

}  // namespace maf_sandbox::runtime
