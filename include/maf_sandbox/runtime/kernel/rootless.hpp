// Rootless mode: what the runtime does differently when it runs as an ordinary user. The host
// half decides the mode and where the user's state lives; the supervisor enters a user namespace
// of its own (mapped with the user's subordinate ids through newuidmap and newgidmap, or with the
// user's own id alone) before it does anything that needs privilege, so every later step (mounts,
// the clone of PID 1) runs as root of that namespace instead of host root.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>

namespace maf_sandbox::runtime {

// True when this process is not host root (its effective uid is not 0, or it is root of a user
// namespace other than the host's, as a rootless supervisor and its helpers are).
bool running_rootless() noexcept;

// Where a rootless user's state goes: $XDG_STATE_HOME/maf-sandbox, else
// ~/.local/state/maf-sandbox (HOME, else the password database's home directory).
std::filesystem::path rootless_state_dir();

// Where a rootless user's volatile state goes (its id-claim table): $XDG_RUNTIME_DIR/maf-sandbox,
// else /run/user/<uid>/maf-sandbox when that directory is the user's, else
// <rootless_state_dir>/run.
std::filesystem::path rootless_runtime_dir();

// The user namespace a rootless supervisor enters. Namespace id 0 is the user's own id (so the
// supervisor, as root of the namespace, still reaches the user's state directory); ids
// [1, 1 + sub_count) map to host ids [sub_base, sub_base + sub_count) when the user has
// subordinate ids, and no other id is mapped when not.
struct RootlessIdMap {
    uid_t uid = 0;
    gid_t gid = 0;
    uid_t sub_base = 0;
    std::uint32_t sub_count = 0;  // 0: the user's own id alone
    std::uint64_t pids = 0;       // RLIMIT_NPROC of the sandbox's ids (0: none)
    std::uint32_t count() const noexcept { return 1 + sub_count; }
};

// The newuidmap (or newgidmap) argument list after the pid: "0 <own> 1 1 <sub_base> <sub_count>".
std::string rootless_map_arguments(const RootlessIdMap& map, bool gids);

// Where newuidmap and newgidmap are (the uidmap package), or nullopt.
std::optional<std::filesystem::path> find_id_map_helper(const char* name);

// Moves the calling single-threaded process into a new user namespace mapped by `map` and makes
// it root there (all capabilities in the namespace, none on the host). With subordinate ids a
// forked helper, still outside, runs newuidmap and newgidmap on the caller; without, the caller
// writes its own one-id maps (setgroups denied first, as the kernel requires). Throws SystemError
// naming the step and the fix.
void enter_rootless_user_namespace(const RootlessIdMap& map);

// A rootless sandbox has no cgroup of its own to prove that a recorded pid is its PID 1. What a
// rootless caller can signal is only its own processes, so the proof it needs is weaker: `pid`
// runs as the caller's uid and is the init (pid 1) of a PID namespace below the caller's.
bool own_pid_namespace_init(pid_t pid);

// What a rootless sandbox enforces of its resource limits on this host. No cgroup is written in
// rootless mode (this runtime's v1 layout needs root, and it does not yet use a systemd-delegated
// v2 subtree): the process count is RLIMIT_NPROC of the guest's ids in the sandbox's own user
// namespace; memory and CPU have no rootless control, so a launch that asks for them is refused
// (SandboxCapabilityNotSupported naming the control and the fix), never run without them.
struct RootlessControls {
    bool pids = true;     // RLIMIT_NPROC, per uid within the sandbox's user namespace
    bool memory = false;  // needs a cgroup
    bool cpus = false;    // needs a cgroup
};
RootlessControls rootless_controls() noexcept;

// The refusal of a rootless launch asking for `control` ("memory" or "cpus"); the message names
// the fix.
[[noreturn]] void refuse_rootless_limit(const char* control, const char* flag);

}  // namespace maf_sandbox::runtime
