// Internal: the ACAS file plane over a sandbox's file system, with the service's semantics
// (reference sections 3.5 and 4.5), acting as the guest's root and with nothing more:
//  - reads and listings follow symlinks in every component; stat follows them only in the
//    parents and describes a final link as a link, echoing the requested path;
//  - a FIFO stats as an empty regular file (reading one is the caller's problem: it never ends);
//  - writes and mkdir create parents as root-owned 0755 directories.
// Every operation runs in a child process with the guest's own authority (guest_authority.hpp):
// inside the sandbox's user and mount namespaces, rooted at its root, as its root user. Links are
// followed as the guest would follow them, so they can never reach the host; the sandbox's /proc,
// /sys and /dev (and device nodes) are refused with 403 PathNotAllowed (file_plane_inside.hpp).
#pragma once

#include <sys/types.h>

#include <boost/json/object.hpp>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "maf_sandbox/runtime/kernel/unique_fd.hpp"
#include "refusal.hpp"

namespace maf_sandbox::emulator {

enum class ReadKind { regular, fifo };

struct OpenedFile {
    runtime::UniqueFd fd;
    std::uint64_t size = 0;
};

struct GuestAuthority;
namespace staging {
class StageKey;
}

class FilePlane {
  public:
    // Borrows `authority` (the sandbox's namespaces and root) and `stage_key` (the state
    // directory's secret that tags a write's staged sibling) for the object's lifetime.
    FilePlane(const GuestAuthority& authority, const staging::StageKey& stage_key)
        : authority_(authority), stage_key_(stage_key) {}

    // What `path` resolves to for a read; throws Refusal (404 missing, 400 directory).
    ReadKind classify_read(std::string_view path) const;
    // A regular file opened for reading, following links, and its size when opened; the
    // caller reads it in pieces (it needs no authority to: the child checked what it opened).
    // Throws Refusal (413 over `max_bytes`).
    OpenedFile open_read(std::string_view path, std::uint64_t max_bytes) const;
    // Writes bytes as the guest's root. `create_dirs` makes missing parents; `mode` applies to a
    // new file.
    void write(std::string_view path, std::string_view content, bool create_dirs,
               std::optional<mode_t> mode) const;
    // The raw stat payload (isDir, isSymlink, symlinkTarget, mode, size, modifiedTime, name,
    // path). Throws Refusal 404 when missing.
    boost::json::object stat(std::string_view path) const;
    // {"path", "entries"} one level deep, as JSON text. Throws Refusal 404 / 400 (not a
    // directory) / 413 ListingTooLarge past `max_entries` or `max_bytes`.
    std::string list(std::string_view path, std::uint64_t max_entries,
                     std::uint64_t max_bytes) const;
    // mkdir -p as the guest's root (new directories 0755).
    void mkdir(std::string_view path) const;
    // Removes a path (a final link is unlinked). A non-empty directory needs `recursive`.
    void remove(std::string_view path, bool recursive) const;

  private:
    const GuestAuthority& authority_;
    const staging::StageKey& stage_key_;
};

}  // namespace maf_sandbox::emulator
