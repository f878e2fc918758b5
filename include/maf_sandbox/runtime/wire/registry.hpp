// The on-disk registry of local sandboxes: one crash-safe JSON record per sandbox under
// <state>/sandboxes/<id>/record.json, readable and writable from any process, so a sandbox outlives
// the process that created it and any process can list, reuse or purge it.
#pragma once

#include <sys/types.h>

#include <boost/json/object.hpp>
#include <boost/json/value.hpp>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "maf_sandbox/core/vocabulary.hpp"
#include "maf_sandbox/runtime/kernel/unique_fd.hpp"

namespace maf_sandbox::runtime {

// The default state directory when neither config nor MAF_SANDBOX_STATE_DIR names one.
inline constexpr const char* kDefaultStateDir = "/var/lib/maf-sandbox";
inline constexpr const char* kStateDirEnv = "MAF_SANDBOX_STATE_DIR";

// MAF_SANDBOX_STATE_DIR when set and non-empty, else kDefaultStateDir.
std::filesystem::path default_state_dir();

enum class SandboxState { creating, running, stopping };
std::string_view to_string(SandboxState state);
SandboxState parse_sandbox_state(std::string_view text);  // InvalidArgument on anything else

struct ResourceLimits {
    std::uint64_t memory_bytes = 0;  // 0 = not set
    std::uint64_t pids = 0;
    double cpus = 0.0;
    std::uint64_t disk_bytes = 0;
    bool operator==(const ResourceLimits&) const = default;
};

struct LifecyclePolicy {
    std::optional<std::chrono::seconds> idle_timeout;
    std::optional<std::chrono::seconds> max_lifetime;
    bool operator==(const LifecyclePolicy&) const = default;
};

// The supervisor process, identified by pid plus its start time (field 22 of /proc/<pid>/stat,
// clock ticks since boot) so a reused pid is never mistaken for it. pid 0 = not started yet.
struct SupervisorRef {
    pid_t pid = 0;
    std::uint64_t start_time = 0;
    bool operator==(const SupervisorRef&) const = default;
};

// Start time (field 22 of /proc/<pid>/stat) of a live process, nullopt when it does not exist.
std::optional<std::uint64_t> process_start_time(pid_t pid);

using Clock = std::chrono::system_clock;

struct SandboxRecord {
    std::string id;  // 32 lowercase hex digits (Registry::new_id)
    std::map<std::string, std::string> labels;
    std::string image;  // "name:tag"
    Egress egress = Egress::closed;
    std::vector<std::string> egress_allow;
    ResourceLimits limits;
    // Whatever the runtime needs to find and tear down this sandbox's kernel objects. Keys the
    // registry and gc understand: "cgroup_paths" (array of absolute paths under /sys/fs/cgroup,
    // removed by gc's default cleanup when the supervisor is dead).
    boost::json::object runtime;
    SupervisorRef supervisor;
    // The sandbox's host id range and the host-wide claim table holding it (id_claims.hpp), once
    // the launch has claimed it; gc releases the claim of a sandbox that is gone.
    struct HostIds {
        uid_t base = 0;
        std::uint32_t count = 0;  // guest ids; the service ids follow them
        std::filesystem::path claims_dir;
        bool operator==(const HostIds&) const = default;
    };
    std::optional<HostIds> host_ids;
    Clock::time_point created_at{};
    Clock::time_point last_used_at{};
    LifecyclePolicy lifecycle;
    SandboxState state = SandboxState::creating;
};

boost::json::value to_json(const SandboxRecord& record);
// Throws InvalidArgument naming the field when the JSON is not a record.
SandboxRecord record_from_json(const boost::json::value& json);

// True when the lifecycle policy says the sandbox should be gone at `now`.
bool lifecycle_expired(const SandboxRecord& record, Clock::time_point now);

// A label selector: `k=v` requirements, all of which must match (AND).
class LabelSelector {
  public:
    LabelSelector() = default;  // matches everything
    explicit LabelSelector(std::map<std::string, std::string> requirements);

    // "k=v,k2=v2" (whitespace around items ignored). Throws InvalidArgument naming the bad item:
    // a missing `=`, an empty or malformed key ([A-Za-z0-9._/-], at most 63), a value that is not
    // [A-Za-z0-9._-] of at most 63 characters, or a key given twice with different values.
    static LabelSelector parse(std::string_view text);
    // One requirement per item (repeated `--label k=v` flags); same validation as parse.
    static LabelSelector parse(const std::vector<std::string>& items);

    bool matches(const std::map<std::string, std::string>& labels) const;
    const std::map<std::string, std::string>& requirements() const noexcept { return required_; }
    bool empty() const noexcept { return required_.empty(); }

  private:
    std::map<std::string, std::string> required_;
};

// An exclusive cross-process lock (flock) held until destruction.
// The lock file is removed when the lock is released (so one-off keys leave nothing behind);
// a taker therefore counts its flock only while the path still names the inode it locked.
class KeyLock {
  public:
    KeyLock() = default;
    KeyLock(UniqueFd fd, std::filesystem::path path) noexcept
        : fd_(std::move(fd)), path_(std::move(path)) {}
    KeyLock(KeyLock&& other) noexcept = default;
    KeyLock& operator=(KeyLock&& other) noexcept {
        if (this != &other) {
            release();
            fd_ = std::move(other.fd_);
            path_ = std::move(other.path_);
        }
        return *this;
    }
    ~KeyLock() { release(); }
    bool held() const noexcept { return fd_.valid(); }

  private:
    void release() noexcept;

    UniqueFd fd_;  // closing the fd releases the flock
    std::filesystem::path path_;
};

class Registry {
  public:
    // Makes <state>, <state>/sandboxes and <state>/locks 0700 through the trust rule
    // (kernel/state_dir.hpp). Throws SystemError.
    explicit Registry(std::filesystem::path state_dir);

    const std::filesystem::path& state_dir() const noexcept { return state_dir_; }

    // 32 random lowercase hex digits from the kernel's random source.
    static std::string new_id();
    // True when `id` is 16 to 64 lowercase hex digits.
    static bool is_id(std::string_view id) noexcept;
    // Throws InvalidArgument unless is_id(id).
    static void validate_id(std::string_view id);

    // <state>/sandboxes/<id> (validated id); the runtime keeps its per-sandbox files here.
    std::filesystem::path sandbox_dir(std::string_view id) const;
    // <state>/mnt: an empty directory on which every sandbox mounts its writable layer, each in
    // its own mount namespace (RootPlan::layer_mount_point). Made by the first sandbox.
    std::filesystem::path layer_mount_point() const { return state_dir_ / "mnt"; }

    // Creates the sandbox directory and writes the record. Throws InvalidArgument when a record
    // with that id exists.
    void create(const SandboxRecord& record);
    // nullopt when there is no (readable) record.
    std::optional<SandboxRecord> get(std::string_view id) const;
    // Replaces an existing record atomically (temp file, then rename; not fsync'd). Throws
    // InvalidArgument when it does not exist.
    void update(const SandboxRecord& record);
    // Removes the record and the whole sandbox directory (never following links, never crossing
    // into another filesystem: a mount left under it is detached first). Missing is success.
    void remove(std::string_view id);
    // Every record, ordered by creation time then id. Unreadable records and stale temp files are
    // skipped.
    std::vector<SandboxRecord> list() const;
    std::vector<SandboxRecord> list(const LabelSelector& selector) const;

    // True when the supervisor's pid exists and its start time matches the record.
    static bool is_alive(const SandboxRecord& record);

    // Blocks until the exclusive lock for `key` is held (flock on <state>/locks/<hash>.lock), for
    // serialised get-or-create across processes. Throws SystemError.
    KeyLock lock(std::string_view key) const;
    // As lock, but returns an unheld KeyLock instead of waiting.
    KeyLock try_lock(std::string_view key) const;

  private:
    std::filesystem::path record_path(std::string_view id) const;
    void write_record(const SandboxRecord& record) const;

    std::filesystem::path state_dir_;
};

}  // namespace maf_sandbox::runtime
