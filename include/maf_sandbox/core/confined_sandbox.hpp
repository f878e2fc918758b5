// The one home of the prologue every path-taking Sandbox method runs (protocol.md 5.1 and 8.8):
// resolve the working directory, confine the path to it, walk its ancestors from the filesystem
// root over an unconfined no-follow stat, check the leaf, and only then act. Backends supply the
// primitives (a stat and the five acts) and choose where an operation runs; the decisions are made
// here once, so the local, ACAS and in-process sandboxes refuse the same paths the same way.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "maf_sandbox/core/sandbox.hpp"
#include "maf_sandbox/core/types.hpp"

namespace maf_sandbox {

// What one file operation acts through. Every path is absolute and normalised, and has already
// passed the checks the act depends on: the base never hands an act a path it did not confine.
class GuestFileOps {
  public:
    virtual ~GuestFileOps() = default;

    // The unconfined, no-follow stat (nullopt when absent) the walk and the leaf checks use.
    virtual Task<std::optional<SandboxEntry>> stat(std::string absolute_path) = 0;
    // Writes the bytes; the leaf is absent or a regular or other non-directory, never a link.
    virtual Task<void> write(std::string absolute_path, std::string content) = 0;
    // The bytes of what the stat last described as a regular file within `max_bytes`.
    virtual Task<std::string> read(std::string absolute_path, std::uint64_t max_bytes) = 0;
    // The immediate children of a directory, each named by its absolute path, in any order.
    virtual Task<std::vector<SandboxEntry>> list(std::string absolute_path) = 0;
    // Removes an existing entry: `leaf` is its stat, and a directory comes only with `recursive`.
    virtual Task<void> remove(std::string absolute_path, const SandboxEntry& leaf,
                              bool recursive) = 0;
};

class ConfinedSandbox : public Sandbox {
  public:
    // Confined, walked; the working directory itself and a final link are refused, and so is a
    // directory (IsADirectory).
    Task<void> write_file(std::string path, std::string content,
                          std::string working_directory) final;
    // Confined, walked; the entry's path is relative to the working directory.
    Task<std::optional<SandboxEntry>> stat_file(std::string path,
                                                std::string working_directory) final;
    // Confined, walked; only a regular file of known size within `max_bytes` is read.
    Task<std::string> read_file(std::string path, std::string working_directory,
                                std::uint64_t max_bytes) final;
    // Confined, walked with the directory itself; children sorted, relative to the working
    // directory.
    Task<std::vector<SandboxEntry>> list_dir(std::string path, std::string working_directory) final;
    // Confined, walked; the working directory itself is refused, a missing path is success, and a
    // directory needs `recursive`.
    Task<void> remove(std::string path, std::string working_directory, bool recursive) final;

  protected:
    using FileWork = std::function<Task<void>(GuestFileOps&)>;

    // Runs one whole operation (prologue and act) against the backend's primitives. A backend
    // that walks with remote stats awaits `work` in place; one that resolves atomically runs it in
    // one off-loop job on one root descriptor, so the operation costs one thread hop.
    virtual Task<void> with_file_ops(FileWork work) = 0;
};

// `absolute` as the protocol reports an entry: relative to the working directory ("" for the
// directory itself), or absolute when it is not inside it.
std::string entry_path_relative_to(const std::string& absolute,
                                   const std::string& working_directory);

}  // namespace maf_sandbox
