// How many sandboxes one caller (an MCP session) may hold at once. A host that serves many
// callers from one machine gives each caller an allowance, so that no caller can make the host
// keep an unbounded number of sandboxes alive until its session ends.
//
// Every acquire counts as one sandbox held until the caller's end (or until a call-scoped sandbox
// is disposed): today each tool call of a session gets a sandbox of its own (issue 11). Once warm
// sandboxes are reused across a session's calls, the count should go by sandbox instance instead,
// so that a reused sandbox takes no second place.
#pragma once

#include <cstddef>
#include <memory>
#include <optional>

namespace maf_sandbox::kinds {

// Single-threaded: use it from the executor of the caller it belongs to (an MCP session's).
class SandboxAllowance : public std::enable_shared_from_this<SandboxAllowance> {
  public:
    // One acquire in progress: counted against the cap until it is settled or dropped. Dropping
    // it unsettled (the acquire failed) gives the place back.
    class Claim {
      public:
        Claim(Claim&& other) noexcept;
        Claim& operator=(Claim&& other) noexcept;
        ~Claim();
        Claim(const Claim&) = delete;
        Claim& operator=(const Claim&) = delete;

        // The acquire returned a sandbox: the place is now held.
        void settle();

      private:
        friend class SandboxAllowance;
        explicit Claim(std::shared_ptr<SandboxAllowance> owner) : owner_(std::move(owner)) {}
        std::shared_ptr<SandboxAllowance> owner_;
    };

    // Throws InvalidArgument when `cap` is 0.
    explicit SandboxAllowance(std::size_t cap);

    // A claim on one more sandbox, or nullopt when the sandboxes held plus the acquires in
    // progress already reach the cap.
    std::optional<Claim> claim();

    // A held sandbox was disposed (a call-scoped sandbox at the end of its call): its place is
    // free again.
    void release();

    std::size_t cap() const noexcept { return cap_; }
    // Sandboxes held plus acquires in progress.
    std::size_t in_use() const noexcept { return held_ + pending_; }

  private:
    std::size_t cap_;
    std::size_t held_ = 0;
    std::size_t pending_ = 0;
};

}  // namespace maf_sandbox::kinds
