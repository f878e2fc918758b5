// The host-side file store a kind copies inputs from: one host directory the host configures.
// Its listing is the injection pin: a name the model invented, or read from a file, is only ever
// used when the listing already holds it.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace maf_sandbox::kinds {

class FileStore {
  public:
    // An empty store: list() is empty and every name is refused.
    FileStore() = default;
    // A store over `root`. Throws InvalidArgument when `root` is not an existing directory.
    explicit FileStore(std::filesystem::path root);

    // The regular files under the root, recursively, as `/`-separated names relative to it, sorted.
    // Links (to files or directories) are never followed or listed, nor are names that are not
    // valid UTF-8 or carry control characters: a name the store lists can be sent to a guest.
    std::vector<std::string> list() const;

    // True when list() holds `name` exactly.
    bool contains(std::string_view name) const;

    // The bytes of a listed file. Throws InvalidArgument when `name` is not in the listing,
    // SandboxTransferCapExceeded when the file is larger than `max_bytes` (refused, never cut),
    // and FileError when it cannot be read.
    std::string read(std::string_view name, std::uint64_t max_bytes) const;

    // The file's size in bytes, or nullopt when `name` is not in the listing.
    std::optional<std::uint64_t> size_of(std::string_view name) const;

    bool empty() const { return !root_.has_value(); }

  private:
    std::optional<std::filesystem::path> root_;
};

}  // namespace maf_sandbox::kinds
