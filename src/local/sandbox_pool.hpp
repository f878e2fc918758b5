// A pool of pre-built local sandboxes, so a create (every acquire at isolation scope `call`, and
// the first acquire of a conversation) costs a relabel instead of a supervisor launch.
//
// Pooled sandboxes are ordinary registry records labelled `maf-pool=<signature>` (and nothing
// else), so `ls`, gc and the registry see them like any other and nothing can leak unseen. The
// signature covers everything fixed at creation: image, work directory, limits, guest user and
// lifecycle. Only closed egress is pooled. A take relabels the record under the registry's lock
// for that signature, so two processes never take the same sandbox; the labels a caller sees are
// applied at take time. Refills run on the backend's thread pool, off the acquiring caller's
// path; the backend that made a pooled sandbox destroys it when it closes if nobody took it.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "maf_sandbox/local/warm_lookup.hpp"
#include "maf_sandbox/runtime/wire/registry.hpp"

namespace maf_sandbox::local {

class SandboxPool {
  public:
    SandboxPool(runtime::Registry& registry, std::size_t size) : registry_(registry), size_(size) {}

    bool enabled() const noexcept { return size_ > 0; }

    // A stable short name (16 hex digits) for everything a pooled sandbox fixes at creation.
    static std::string signature(const std::vector<std::string>& parts);

    // Takes a live pooled sandbox of `signature`, relabelled with `labels` (take_pooled); nullopt
    // when there is none.
    std::optional<runtime::SandboxRecord> take(
        const std::string& signature, const std::map<std::string, std::string>& labels,
        const std::optional<runtime::SandboxOwner>& owner = std::nullopt);

    // How many more sandboxes `signature` needs to be full, counting refills in flight; the
    // caller then creates that many (labelled pool_labels(signature)) and calls created() for
    // each, or refill_failed() when one could not be made.
    std::size_t claim_refills(const std::string& signature);
    void created(const std::string& signature, const std::string& id);
    void refill_failed(const std::string& signature);
    static std::map<std::string, std::string> pool_labels(const std::string& signature);

    // Blocks until no refill is in flight (for benchmarks and tests that measure a full pool).
    void wait_idle();

    // The ids this process put in the pool, to destroy when the backend closes (records that
    // were taken meanwhile carry other labels and are skipped by the caller's re-check).
    std::vector<std::string> made_here() const;

  private:
    std::size_t ready_count(const std::string& signature) const;

    runtime::Registry& registry_;
    std::size_t size_;
    mutable std::mutex mutex_;
    std::condition_variable idle_;
    std::map<std::string, std::size_t> in_flight_;
    std::set<std::string> made_;
};

}  // namespace maf_sandbox::local
