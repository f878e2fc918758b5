// The image store's working directories and who holds them. An import unpacks into
// `images/.import-<random>` and a removal moves the image to `images/.remove-<random>` before
// removing it; the process doing either holds an flock on that directory for as long as it
// lives, so the kernel drops the lock however the process ends. A leftover is one nobody holds:
// `sweep` removes exactly those. The store lock (`images/.lock`) closes the window between making
// such a directory and locking it: a process holds it shared across both steps, and a sweep holds
// it exclusive while it decides which leftovers nobody holds.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "maf_sandbox/runtime/host/images.hpp"
#include "maf_sandbox/runtime/kernel/unique_fd.hpp"

namespace maf_sandbox::runtime::image_staging {

inline constexpr std::string_view kImportPrefix = ".import-";
inline constexpr std::string_view kRemovePrefix = ".remove-";

class StoreLock {
  public:
    StoreLock(int images_fd, bool exclusive);

  private:
    UniqueFd fd_;
};

// A directory of the store this process holds (flock) while the object lives.
class HeldDir {
  public:
    // Makes `<prefix><random>` (0700) in the store and holds it, under the store lock.
    static HeldDir create(int images_fd, std::string_view prefix);
    // Holds the directory `name` in `parent_fd` without waiting. nullopt: another process holds
    // it. Throws SystemError (ENOTDIR, ELOOP for a link, ENOENT) when it is not a directory.
    static std::optional<HeldDir> try_hold(int parent_fd, const std::string& name);

    int fd() const noexcept { return fd_.get(); }
    const std::string& name() const noexcept { return name_; }
    // Drops the lock (and the descriptor).
    void release() noexcept { fd_.reset(); }

  private:
    HeldDir(UniqueFd fd, std::string name) : fd_(std::move(fd)), name_(std::move(name)) {}
    UniqueFd fd_;
    std::string name_;
};

// Removes the store's `.import-*` and `.remove-*` directories that nobody holds, with a bounded
// number of descriptors and never following a link in them; a half-removed one is finished.
ImageSweepReport sweep(int images_fd);

}  // namespace maf_sandbox::runtime::image_staging
