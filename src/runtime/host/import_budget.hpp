// What one image import may still write (ImportLimits, images.hpp): every entry and every byte
// is charged here before it is written, so the refusal comes while the store still has room.
#pragma once

#include <cstdint>
#include <string>

#include "maf_sandbox/runtime/host/images.hpp"

namespace maf_sandbox::runtime::image_archive {

class ImportBudget {
  public:
    // `store_fd`: a descriptor on the store's filesystem, for its free bytes and inodes.
    ImportBudget(ImportLimits limits, int store_fd);

    // One archive entry at the clean relative `path` (its depth is its component count).
    // Throws ImageImportLimitExceeded for the entry cap, the depth cap or the inode floor.
    void entry(const std::string& path);

    // `more` bytes about to be written for `path`. Throws ImageImportLimitExceeded for the byte
    // cap or the free-space floor.
    void bytes(std::uint64_t more, const std::string& path);

    std::uint64_t bytes_used() const noexcept { return bytes_; }
    std::uint64_t entries_used() const noexcept { return entries_; }

  private:
    void check_free_bytes(std::uint64_t more, const std::string& path) const;

    ImportLimits limits_;
    int store_fd_;
    std::uint64_t bytes_ = 0;
    std::uint64_t entries_ = 0;
};

}  // namespace maf_sandbox::runtime::image_archive
