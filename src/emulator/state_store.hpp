// Internal: the emulator's persistent state (sandboxes, labels, policies, disk images), one JSON
// document under <state-dir>/emulator/state.json rewritten crash-safely on every change.
#pragma once

#include <boost/json/object.hpp>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace maf_sandbox::emulator {

// Sandbox states as the service spells them.
namespace states {
inline constexpr const char* kCreating = "Creating";
inline constexpr const char* kRunning = "Running";
inline constexpr const char* kStopped = "Stopped";
inline constexpr const char* kSuspended = "Suspended";
inline constexpr const char* kDeleting = "Deleting";
inline constexpr const char* kFailed = "Failed";
}  // namespace states

// A group is the path "/subscriptions/{sub}/resourceGroups/{rg}/sandboxGroups/{group}" with
// every segment lower-cased (Azure resource paths compare case-insensitively). Sandboxes and
// disk images belong to exactly one group; a document written before groups were recorded has
// an empty group and is visible in every group.
bool in_group(const std::string& doc_group, const std::string& group);

struct SandboxDoc {
    std::string id;
    std::string group;
    std::map<std::string, std::string> labels;
    std::string state = states::kCreating;
    std::string stopped_reason;  // Idle, UserStopped ("" when never stopped)
    std::string stopped_at;      // ISO 8601
    std::string created_at;
    boost::json::object sources_ref;
    boost::json::object resources;
    boost::json::object egress_policy;
    boost::json::object lifecycle;
    boost::json::object environment;
    std::string image;  // the local image the sandbox runs
    std::string failure;
    boost::json::object handle;  // the engine's handle; empty until launched
    double last_activity = 0;    // unix seconds: the last exec or file call
    double state_since = 0;      // unix seconds: when `state` was entered

    // The Sandbox resource as the service answers it (reference section 3.1).
    boost::json::object to_wire(const std::string& region) const;
};

struct DiskImageDoc {
    std::string id;
    std::string group;
    std::string name;
    std::map<std::string, std::string> labels;
    std::string base;               // the registry reference it was imported from
    std::string state = "Pending";  // Pending, Ready, Failed
    std::string message;
    std::string created_at;
    std::string local_image;  // the runtime image it became

    boost::json::object to_wire() const;
};

// The emulator's state is a host file every client request can add to (labels, environment,
// policies, disk images): each record and the number of records are capped, so no client grows it
// without bound. put() and mutate() throw StateRecordTooLarge (the routes answer 413) and leave the
// state as it was.
inline constexpr std::size_t kMaxStateRecordBytes = 256 * 1024;
inline constexpr std::size_t kMaxStateRecords = 4096;

struct StateRecordTooLarge : std::runtime_error {
    using std::runtime_error::runtime_error;
};

class StateStore {
  public:
    // Loads <dir>/emulator/state.json when present. Throws Error when it is unreadable.
    explicit StateStore(std::filesystem::path state_dir);

    // Every accessor copies under the lock; mutate() applies a change and persists it.
    std::optional<SandboxDoc> sandbox(const std::string& id) const;
    std::vector<SandboxDoc> sandboxes() const;
    // Applies `change` to the sandbox (absent: returns false) and persists.
    bool mutate(const std::string& id, const std::function<void(SandboxDoc&)>& change);
    // As mutate, but kept in memory until the next persisted change: for the activity stamp
    // every exec and file call sets, which must not cost an fsync per request.
    bool mutate_volatile(const std::string& id, const std::function<void(SandboxDoc&)>& change);
    void put(const SandboxDoc& doc);
    // put() for a sandbox being created: stamps its createdAt under the store's lock, strictly
    // later than every earlier one, so createdAt order is the order in which sandboxes became
    // listable. A client that lists after its create then sees every older sandbox of its key,
    // which is what lets racing clients agree on one winner (the oldest), as on the service.
    void put_new(SandboxDoc& doc);
    void erase(const std::string& id);

    std::optional<DiskImageDoc> disk_image(const std::string& id) const;
    std::vector<DiskImageDoc> disk_images() const;
    void put(const DiskImageDoc& doc);
    void erase_disk_image(const std::string& id);

  private:
    void save_locked() const;
    // Throw StateRecordTooLarge: a record over kMaxStateRecordBytes; a new record (`adds`) past
    // kMaxStateRecords.
    void check_record(std::size_t bytes, const char* what) const;
    void check_count(bool adds) const;

    std::filesystem::path file_;
    mutable std::mutex mutex_;
    std::map<std::string, SandboxDoc> sandboxes_;
    std::int64_t last_created_us_ = 0;
    std::map<std::string, DiskImageDoc> disk_images_;
};

// Helpers shared by the routes.
double unix_now();
std::string iso_time(double unix_seconds);
std::string new_guid();

}  // namespace maf_sandbox::emulator
