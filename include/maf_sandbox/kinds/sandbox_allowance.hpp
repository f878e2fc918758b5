// How many sandboxes one caller (an MCP session) may hold at once. A host that serves many
// callers from one machine gives each caller an allowance, so that no caller can make the host
// keep an unbounded number of sandboxes alive until its session ends.
//
// The allowance counts distinct sandboxes, not acquires. A backend holds at most one sandbox per
// (key, kind), so each distinct (key, kind) a caller acquired is one sandbox it holds: at
// conversation scope every call of a kind reuses the same one and takes no second place; at call
// scope each call's key names the call, so each call holds a place until its sandbox is disposed.
#pragma once

#include <cstddef>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>

#include "maf_sandbox/core/types.hpp"

namespace maf_sandbox::kinds {

// The one sandbox a backend keeps for `key` and `kind`, as the allowance names it.
std::string sandbox_slot(const SandboxKey& key, std::string_view kind);

// Single-threaded: use it from the executor of the caller it belongs to (an MCP session's).
class SandboxAllowance : public std::enable_shared_from_this<SandboxAllowance> {
  public:
    // One acquire in progress for one slot: counted against the cap (once per slot, however many
    // calls acquire it at once) until it is settled or dropped. Dropping it unsettled (the
    // acquire failed) gives the place back unless the slot is held.
    class Claim {
      public:
        Claim(Claim&& other) noexcept;
        Claim& operator=(Claim&& other) noexcept;
        ~Claim();
        Claim(const Claim&) = delete;
        Claim& operator=(const Claim&) = delete;

        // The acquire returned the slot's sandbox: the slot is now held.
        void settle();

      private:
        friend class SandboxAllowance;
        Claim(std::shared_ptr<SandboxAllowance> owner, std::string slot)
            : owner_(std::move(owner)), slot_(std::move(slot)) {}
        void drop() noexcept;
        std::shared_ptr<SandboxAllowance> owner_;
        std::string slot_;
    };

    // Throws InvalidArgument when `cap` is 0.
    explicit SandboxAllowance(std::size_t cap);

    // A claim on the sandbox of `slot`. A slot already held or being acquired costs nothing
    // more; a new one is refused (nullopt) when the held slots plus the new slots being acquired
    // already reach the cap.
    std::optional<Claim> claim(const std::string& slot);

    // The slot's sandbox was disposed (a call-scoped sandbox at the end of its call): its place
    // is free again.
    void release(const std::string& slot);

    std::size_t cap() const noexcept { return cap_; }
    // Distinct sandboxes held plus distinct new ones being acquired.
    std::size_t in_use() const noexcept;
    // Distinct sandboxes held.
    std::size_t held() const noexcept { return held_.size(); }

  private:
    std::size_t cap_;
    std::set<std::string> held_;
    // Acquires in progress, by slot.
    std::map<std::string, std::size_t> pending_;
};

}  // namespace maf_sandbox::kinds
