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
#include <string_view>
#include <vector>

#include "disk_image_state.hpp"
#include "maf_sandbox/runtime/kernel/unique_fd.hpp"
#include "sandbox_state.hpp"
#include "stage_key.hpp"

namespace maf_sandbox::emulator {

// A group is the path "/subscriptions/{sub}/resourceGroups/{rg}/sandboxGroups/{group}" with
// every segment lower-cased (Azure resource paths compare case-insensitively). Sandboxes and
// disk images belong to exactly one group; a document written before groups were recorded has
// an empty group and is visible in every group.
bool in_group(const std::string& doc_group, const std::string& group);

// Ends a refused state directory's remedy (runtime/state_dir.hpp).
inline constexpr std::string_view kEmulatorStateAdvice =
    "or a new directory such as /var/lib/acas-emulator";

struct SandboxDoc {
    std::string id;
    std::string group;
    std::map<std::string, std::string> labels;
    SandboxState state = SandboxState::creating;
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
    std::string base;  // the registry reference it was imported from
    DiskImageState state = DiskImageState::pending;
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

// A strict write (put, mutate, erase) could not be persisted: the change was undone, so memory
// and disk agree and the caller can answer the request as failed (507 when the disk is full).
// what() names no host path (it reaches clients); detail() does, for the log.
class StateNotPersisted : public std::runtime_error {
  public:
    StateNotPersisted(int error_number, std::string detail);
    int error_number() const noexcept { return error_number_; }
    bool no_space() const noexcept;
    const std::string& detail() const noexcept { return detail_; }

  private:
    int error_number_;
    std::string detail_;
};

class StateStore {
  public:
    // Loads <dir>/emulator/state.json when present, and the file plane's staging key
    // (stage_key.hpp) beside it. Throws Error when either is unreadable or refused.
    explicit StateStore(std::filesystem::path state_dir);

    // The state directory's secret that tags the file plane's staged siblings, so a later run
    // recognises what an earlier one left behind. Immutable: any thread may use it.
    const staging::StageKey& stage_key() const noexcept { return stage_key_; }

    // Every accessor copies under the lock.
    //
    // Two kinds of write. The strict ones (mutate, put, erase and their disk-image forms) are all
    // or nothing: when the state cannot be persisted (a full disk) they undo the change and throw
    // StateNotPersisted, for a client request that is then answered as failed. The eventual ones
    // (record, forget) are the emulator's own transitions after it has accepted a request (a
    // launch finished, a deletion done): they apply in memory at once, because that is what the
    // sandbox now is, and persist now or at the next flush(), so nothing sticks when the disk
    // refuses one write and later has space again.
    std::optional<SandboxDoc> sandbox(const std::string& id) const;
    std::vector<SandboxDoc> sandboxes() const;
    // Applies `change` to the sandbox (absent: returns false) and persists.
    bool mutate(const std::string& id, const std::function<void(SandboxDoc&)>& change);
    // As mutate, but eventual: never throws for a failed save (see above).
    bool record(const std::string& id, const std::function<void(SandboxDoc&)>& change);
    // Removes the sandbox's record, eventually.
    void forget(const std::string& id);
    // Persists what an eventual write could not. Returns false (and keeps it pending) when the
    // save fails again; the error is in `failure` when given.
    bool flush(std::string* failure = nullptr);
    // Whether memory holds changes the disk does not.
    bool pending() const;
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
    // The import's outcome (Ready, Failed), eventually, as record() for a sandbox: replaces the
    // image's record if it still exists (false when it was deleted meanwhile).
    bool record(const DiskImageDoc& doc);
    void erase_disk_image(const std::string& id);

  private:
    // How a change reaches the disk: strictly (undone and StateNotPersisted thrown when the save
    // fails) or eventually (kept, and the state marked pending).
    enum class Save { strictly, eventually };
    // mutate() and record(): applies `change` to a copy of the sandbox's record, checks its size,
    // puts it in place and saves as `save` says. False when there is no such sandbox.
    bool change_sandbox(const std::string& id, const std::function<void(SandboxDoc&)>& change,
                        Save save);
    // Throws StateNotPersisted; clears pending_ on success.
    void save_locked() const;
    // save_locked for an eventual write: a failure only marks the state pending.
    void save_eventually_locked() const;
    // Throw StateRecordTooLarge: a record over kMaxStateRecordBytes; a new record (`adds`) past
    // kMaxStateRecords.
    void check_record(std::size_t bytes, const char* what) const;
    void check_count(bool adds) const;

    std::filesystem::path file_;
    runtime::UniqueFd dir_;  // <state-dir>/emulator, checked by the state-directory trust rule
    staging::StageKey stage_key_;
    mutable std::mutex mutex_;
    std::map<std::string, SandboxDoc> sandboxes_;
    std::int64_t last_created_us_ = 0;
    std::map<std::string, DiskImageDoc> disk_images_;
    mutable bool pending_ = false;
};

// Helpers shared by the routes.
double unix_now();
std::string iso_time(double unix_seconds);
std::string new_guid();

}  // namespace maf_sandbox::emulator
