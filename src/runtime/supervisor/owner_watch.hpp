// The owner watch of a one-shot sandbox (owner.hpp), private to the supervisor.
//
// Started first thing in the supervisor's host-side half, while that process is still in the
// host's mount, PID and cgroup namespaces and in none of the sandbox's cgroups: it forks a small
// watcher that stays there. The watcher holds a pidfd on the owner (opened here, on the host side,
// then checked against the owner's start time, so a reused pid is never taken for the owner) and
// the read end of a life pipe whose write end only the sandbox's PID 1 keeps (PID 1 and whatever
// it forks inherit it; it is close-on-exec, so no guest program holds it).
//   - The owner ends (by any signal): the watcher kills everything in the sandbox's cgroups
//     (PID 1 with them, and so the whole PID namespace), removes the cgroups, then the sandbox's
//     directory and registry record: what gc would do, done at once.
//   - The life pipe reaches EOF (the sandbox ended: disposed, idle, failed to start): the watcher
//     exits. It never outlives the sandbox by more than that.
// Co-owners (owner.hpp): when an owner ends while another the record names still runs, the
// watcher watches that one instead; the sandbox goes when the last of them has ended.
// A pooled sandbox has no owner yet: its watcher waits (reading the registry record every
// kOwnerPollInterval) until a taker records one, and exits when it is taken without one. A
// conversation's sandbox (watch_later_owners) has none either: its watcher reads the record every
// kLaterOwnerPollInterval for as long as the sandbox lives, since a front end that reuses it later
// may record itself.
#pragma once

#include <chrono>

#include "maf_sandbox/runtime/kernel/unique_fd.hpp"
#include "maf_sandbox/runtime/wire/supervisor_config.hpp"

namespace maf_sandbox::runtime {

inline constexpr std::chrono::milliseconds kOwnerPollInterval{250};
inline constexpr std::chrono::milliseconds kLaterOwnerPollInterval{1000};

// Starts the watcher when the config names an owner or awaits one; returns the life pipe's write
// end, which the caller must hold until PID 1 is cloned (an invalid fd when no watcher was
// started). Throws SystemError when the owner is already gone or the
// watcher cannot be started, so that the launch fails instead of leaving an unwatched sandbox.
UniqueFd start_owner_watch(const SupervisorConfig& config);

}  // namespace maf_sandbox::runtime
