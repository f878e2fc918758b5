// Native file operations inside a sandbox's root filesystem, anchored on one directory fd.
//
// Every path is resolved with openat2(RESOLVE_IN_ROOT | RESOLVE_NO_SYMLINKS |
// RESOLVE_NO_MAGICLINKS) relative to the root fd, so checking a path and opening it are one atomic
// kernel step: a link swapped in mid-operation fails the resolution instead of redirecting it
// outside the root. This is stronger than ACAS, whose stat-then-act walk has a documented
// confinement residual (docs/protocol.md 3.1: the walk and the write are not one atomic step).
//
// Paths are absolute guest paths ("/maf-sandbox/work/a.txt"); confine them against the call's
// working directory first (core paths.hpp). Methods are synchronous, fast and thread-safe (the
// root fd never changes); async callers run them off the event loop.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "maf_sandbox/core/vocabulary.hpp"
#include "maf_sandbox/runtime/kernel/unique_fd.hpp"

namespace maf_sandbox::runtime {

// The owner of everything GuestFs creates, as ids seen by the calling (host) process, i.e.
// already mapped through the sandbox's user namespace.
struct GuestOwner {
    uid_t uid = 0;
    gid_t gid = 0;
};

// One entry: for stat, `name` is the absolute guest path asked for; for list, the child's name.
// A link's, a directory's and an "other" entry's size is unknown (nullopt).
struct GuestEntry {
    std::string name;
    EntryKind kind = EntryKind::other;
    std::optional<std::uint64_t> size_bytes;
    bool operator==(const GuestEntry&) const = default;
};

struct GuestWriteOptions {
    mode_t mode = 0644;  // applied exactly (no umask)
    bool fsync = false;  // fsync the file before the rename
    // A link at the final name is replaced (renameat swaps the name, never follows it) instead of
    // refused. For files the host generates into a root it builds (an image's /etc/resolv.conf is
    // often a link), never for files a client names.
    bool replace_link = false;
};

class GuestFs {
  public:
    // Takes ownership of `root` (O_PATH | O_DIRECTORY is enough; the runtime opens
    // /proc/<supervisor pid>/root).
    GuestFs(UniqueFd root, GuestOwner owner);

    // Opens a host directory as the root (tests, image extraction). Throws SystemError.
    static GuestFs open(const std::filesystem::path& host_root, GuestOwner owner);

    GuestFs(GuestFs&&) noexcept = default;
    GuestFs& operator=(GuestFs&&) noexcept = default;

    int root_fd() const noexcept { return root_.get(); }
    const GuestOwner& owner() const noexcept { return owner_; }

    // lstat-like. nullopt when the path or any ancestor is absent. A final link is described as
    // EntryKind::symlink with unknown size. A link among the ancestors throws ConfinementEscape; a
    // non-directory ancestor NotADirectory.
    std::optional<GuestEntry> stat(std::string_view guest_path) const;

    // The bytes of a regular file. The file is opened O_PATH first and checked S_ISREG, so a FIFO,
    // socket or device is never opened for reading (FileError). A final link throws FileError
    // (links are never followed), a directory IsADirectory, a missing file FileNotFound, a file
    // over `max_bytes` SandboxTransferCapExceeded before anything is read (refused, never
    // truncated; a file growing past the cap while read is refused too), and a read still running
    // at `deadline` Timeout. Ancestors as for stat.
    std::string read(std::string_view guest_path, std::uint64_t max_bytes,
                     std::optional<std::chrono::steady_clock::time_point> deadline = {}) const;

    // Immediate children sorted by name, links reported as links (never followed). The listed
    // directory itself must not be a link (ConfinementEscape); a file throws NotADirectory; a
    // missing one FileNotFound.
    std::vector<GuestEntry> list(std::string_view guest_path) const;

    // Writes `content` atomically: a temporary sibling created O_EXCL in the resolved parent,
    // written, fchown'd to the owner, then renamed into place (a reader sees the old or the new
    // bytes, never a mix). Missing parents are created owned by the owner. A final link throws
    // ConfinementEscape, a directory IsADirectory; the root itself InvalidArgument.
    void write(std::string_view guest_path, std::string_view content,
               GuestWriteOptions options = {}) const;

    // mkdir -p; every directory created is owned by the owner (mode 0755). An existing directory
    // is success; an existing link among the components throws ConfinementEscape, any other
    // non-directory NotADirectory.
    void mkdirs(std::string_view guest_path) const;

    // mkdirs, returning the final directory opened O_RDONLY | O_DIRECTORY (for fchown / fchmod, or
    // as the root of a further GuestFs). Same refusals as mkdirs.
    UniqueFd make_directory(std::string_view guest_path) const;

    // A mount point: the directory (mkdirs) or empty regular file (created O_EXCL, owned by the
    // owner; missing parents made as by mkdirs) at the path, opened O_PATH without following
    // anything, so a mount placed on it through the descriptor lands exactly there. A link at or
    // above the path throws ConfinementEscape; an existing entry of the other kind NotADirectory
    // (a directory wanted) or IsADirectory (a file wanted); a FIFO, socket or device FileError.
    UniqueFd mount_point(std::string_view guest_path, bool directory) const;

    // Creates a link named `guest_path` holding `target` (missing parents made as by mkdirs). An
    // existing entry of that name is left as it is, or with `replace` removed first (a directory
    // with everything in it). The link is created, never followed.
    void symlink(std::string_view guest_path, const std::string& target,
                 bool replace = false) const;

    // --- extraction (image layers): each replaces whatever is at the final name -----------------
    // The final name is unlinked (a directory removed recursively) and made anew, so nothing an
    // earlier entry or layer planted there is ever written through. Parents as for mkdirs: a link
    // among them throws ConfinementEscape.

    // A new, empty regular file (O_CREAT | O_EXCL | O_NOFOLLOW), returned open for writing; owned
    // by the owner with `mode` until the caller changes that through the descriptor.
    UniqueFd create_file(std::string_view guest_path, mode_t mode) const;

    // The directory at the path (an existing directory is kept, anything else replaced), opened
    // O_RDONLY | O_DIRECTORY for the caller's fchown / fchmod.
    UniqueFd replace_with_directory(std::string_view guest_path) const;

    // A hard link named `guest_path` to the existing non-directory `existing` (resolved without
    // following any link; a final link is linked itself, never its target).
    void hard_link(std::string_view guest_path, std::string_view existing) const;

    // Removes a path. Missing (or a missing ancestor) is success. A link is unlinked, never
    // followed; a directory needs `recursive` (IsADirectory otherwise); recursive removal walks
    // by directory fd with O_NOFOLLOW at every level and never follows a link. Removing the root
    // throws InvalidArgument; a link among the ancestors ConfinementEscape.
    void remove(std::string_view guest_path, bool recursive) const;

  private:
    UniqueFd root_;
    GuestOwner owner_;
};

}  // namespace maf_sandbox::runtime
