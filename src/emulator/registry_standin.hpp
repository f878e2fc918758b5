// Internal: the local registry stand-in. `acas-emulator images add ARCHIVE --ref REF` stores an
// archive under <state-dir>/registry so that a disk-image import naming REF can "pull" it; an
// unknown reference fails the import the way a failed pull does.
#pragma once

#include <filesystem>
#include <optional>
#include <string>

namespace maf_sandbox::emulator {

class RegistryStandIn {
  public:
    explicit RegistryStandIn(std::filesystem::path state_dir);
    // Copies `archive` in and maps `ref` to it (replacing an earlier mapping).
    void add(const std::filesystem::path& archive, const std::string& ref);
    // The stored archive for `ref`, or nullopt.
    std::optional<std::filesystem::path> find(const std::string& ref) const;

  private:
    std::filesystem::path dir_;
};

}  // namespace maf_sandbox::emulator
