// The slot table: which sandbox this backend holds for each (key, kind), which deletions of a slot
// are still owed, which discarded sandbox the slot's next acquire must report, the per-slot
// acquire locks, and the per-conversation admission of acquires against scope purges.
//
// One mutex guards all of it, and each method is one critical section, so these hold whenever the
// mutex is free:
// - A slot holds at most one sandbox, never a null one, and never one marked invalidated:
//   invalidate() takes it out and owes its deletion in the same step.
// - An owed deletion stays until a deletion of that id was observed (settle). A slot that owes
//   one hands nothing out: acquire settles it first or refuses.
// - A replacement notice exists only for a sandbox that had been handed out, and the slot's next
//   hand-over takes it once.
// - No conversation has an acquire admitted while a purge of it is admitted, nor the reverse.
// Nothing here does I/O or waits; the locks it hands out are waited on by their callers.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>

#include "async_mutex.hpp"
#include "held_sandbox.hpp"

namespace maf_sandbox::acas {

class SlotTable {
  public:
    // --- Held sandboxes ------------------------------------------------------------------------
    std::shared_ptr<HeldSandbox> held(const SlotKey& slot) const;
    std::optional<std::string> held_id(const SlotKey& slot) const;
    // Makes `sandbox` the slot's sandbox (a new create, or one adopted from the service).
    void hold(std::shared_ptr<HeldSandbox> sandbox);
    // Forgets the slot's sandbox if it is still `sandbox`; false when another took its place.
    bool forget(const std::shared_ptr<HeldSandbox>& sandbox);

    // --- Owed deletions -------------------------------------------------------------------------
    std::set<std::string> owed(const SlotKey& slot) const;
    bool owes(const SlotKey& slot) const;
    void owe(const SlotKey& slot, const std::string& id);
    // A deletion of `id` was observed: the slot no longer owes it.
    void settle(const SlotKey& slot, const std::string& id);

    // Marks `sandbox` invalidated, forgets it and owes its deletion, all in one step, and records
    // the replacement notice when it had been handed out. False when it was invalidated already
    // (someone else is disposing it).
    bool invalidate(const std::shared_ptr<HeldSandbox>& sandbox, const std::string& reason);
    // The notice of a discarded sandbox the slot's next hand-over reports, taken once.
    std::optional<SandboxReplacement> take_replacement(const SlotKey& slot);
    // The notice without taking it (the discard that records it on the service reads it).
    std::optional<SandboxReplacement> replacement(const SlotKey& slot) const;

    // Takes every held and owed sandbox of `key` (of `kind`, or of every kind), id -> kind, and
    // drops their notices: the caller disposes them and owes again what it fails to delete.
    std::map<std::string, std::string> take_key(const SandboxKey& key,
                                                const std::optional<std::string>& kind);
    // Takes every held and owed sandbox of a conversation, id -> slot.
    std::map<std::string, SlotKey> take_conversation(const Conversation& conversation);

    // The lock that serialises acquires of one slot, across io_contexts.
    std::shared_ptr<detail::AsyncMutex> lock_for(const SlotKey& slot);

    // --- Admission: acquires against scope purges, per conversation -----------------------------
    // Counts an acquire in; throws SandboxCleanupPending while a purge of it runs.
    void admit_acquire(const Conversation& conversation);
    void end_acquire(const Conversation& conversation);
    // Counts a purge in; false (nothing counted) while an acquire of it runs.
    bool admit_purge(const Conversation& conversation);
    void end_purge(const Conversation& conversation);

  private:
    mutable std::mutex mutex_;
    std::map<SlotKey, std::shared_ptr<HeldSandbox>> held_;
    std::map<SlotKey, std::set<std::string>> owed_;
    // Sandboxes discarded after a caller used them (an exec whose outcome is unknown, a failed
    // capture): the key's next acquire in this process reports it on the sandbox it returns.
    std::map<SlotKey, SandboxReplacement> replaced_;
    std::map<SlotKey, std::shared_ptr<detail::AsyncMutex>> locks_;
    std::map<Conversation, int> acquiring_;
    std::map<Conversation, int> purging_;
};

// Holds an acquire's admission for its conversation (SlotTable::admit_acquire).
class AcquireTicket {
  public:
    AcquireTicket(SlotTable& slots, Conversation conversation);
    ~AcquireTicket();
    AcquireTicket(const AcquireTicket&) = delete;
    AcquireTicket& operator=(const AcquireTicket&) = delete;

  private:
    SlotTable& slots_;
    Conversation conversation_;
};

// Holds an admitted purge (SlotTable::admit_purge returned true) until it ends.
class PurgeTicket {
  public:
    PurgeTicket(SlotTable& slots, Conversation conversation)
        : slots_(slots), conversation_(std::move(conversation)) {}
    ~PurgeTicket() { slots_.end_purge(conversation_); }
    PurgeTicket(const PurgeTicket&) = delete;
    PurgeTicket& operator=(const PurgeTicket&) = delete;

  private:
    SlotTable& slots_;
    Conversation conversation_;
};

}  // namespace maf_sandbox::acas
