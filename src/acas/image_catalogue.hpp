// The image catalogue: what this backend has learned about images, so a warm process resolves a
// spec's image to a create source without asking the service again, and the image-level hint of
// the removal probe (README: "an image-level hint can refuse before a create for 60 seconds from
// its completed probe").
//
// One mutex guards it, each method one critical section, so these hold whenever it is free:
// - A prebuilt name or a disk image id is remembered only after the service listed it, and is
//   never forgotten (an image that disappears fails the create, which says so).
// - A hint is written only by a completed probe, and only when that probe started after the one
//   that wrote the current hint (generation order): a slower, older probe never overwrites a
//   newer verdict, and a refusal served from the hint never extends it.
// - An expired hint is never served: the next look drops it.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>

#include "maf_sandbox/acas/client.hpp"
#include "maf_sandbox/core/sandbox.hpp"

namespace maf_sandbox::acas {

class ImageCatalogue {
  public:
    // `registry` qualifies repo:tag images; `hint_lifetime` is how long a probe's verdict lasts.
    ImageCatalogue(std::string registry, Seconds hint_lifetime);

    // Resolves the spec's image to a create source before anything is created: a pinned
    // image_id as is, a catalogue name the service lists, or an imported repo:tag. Asks the
    // service only for what it has not learned yet. Throws InvalidArgument naming what the
    // service offers when the image is unknown to it.
    Task<CreateSandboxRequest> resolve(AcasClient& client, const SandboxSpec& spec,
                                       Deadline deadline);

    bool knows_prebuilt(const std::string& name) const;
    void remember_prebuilt(const std::string& name);
    std::optional<std::string> disk_image_of(const std::string& reference) const;
    void remember_disk_image(const std::string& reference, const std::string& id);

    // The generation a removal probe starting now records its verdict under.
    std::uint64_t start_probe();
    // A completed probe's verdict for `image` (a create source; empty: unknown, nothing kept).
    void record_verdict(const std::string& image, std::uint64_t generation, bool refused);
    // True while a live hint refuses `image`.
    bool hint_refuses(const std::string& image);

  private:
    struct Hint {
        SteadyClock::time_point expires;
        std::uint64_t generation = 0;
        bool refused = false;
    };

    const std::string registry_;
    const SteadyClock::duration hint_lifetime_;
    mutable std::mutex mutex_;
    std::set<std::string> prebuilt_;
    std::map<std::string, std::string> disk_images_;  // qualified reference -> disk image id
    std::map<std::string, Hint> hints_;
    std::uint64_t probe_generation_ = 0;
};

// The create source the hint and the held sandbox are keyed by: "prebuilt:<name>" or
// "disk:<id>".
std::string source_key(const CreateSandboxRequest& request);

}  // namespace maf_sandbox::acas
