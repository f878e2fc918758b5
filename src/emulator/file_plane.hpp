// Internal: the ACAS file plane over a sandbox's root directory, with the service's semantics
// (reference sections 3.5 and 4.5), acting as the guest's root:
//  - reads and listings follow symlinks in every component; stat follows them only in the
//    parents and describes a final link as a link, echoing the requested path;
//  - a FIFO stats as an empty regular file (reading one is the caller's problem: it never ends);
//  - writes and mkdir create parents as root-owned 0755 directories.
// Every resolution is openat2(RESOLVE_IN_ROOT): links are followed, but never out of the guest.
#pragma once

#include <sys/types.h>

#include <boost/json/object.hpp>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace maf_sandbox::emulator {

// A refusal the routes answer as problem+json.
struct PlaneError {
    int status;
    std::string title;
    std::string detail;
};

struct FileOwner {
    uid_t uid = 0;
    gid_t gid = 0;
};

enum class ReadKind { regular, fifo };

class FilePlane {
  public:
    // Borrows `root_fd` (an O_PATH directory fd on the guest's root) for the object's lifetime.
    FilePlane(int root_fd, FileOwner owner) : root_(root_fd), owner_(owner) {}

    // What `path` resolves to for a read; throws PlaneError (404 missing, 400 directory).
    ReadKind classify_read(std::string_view path) const;
    // The bytes of a regular file, following links. Throws PlaneError.
    std::string read(std::string_view path, std::uint64_t max_bytes) const;
    // Writes bytes as root. `create_dirs` makes missing parents; `mode` applies to a new file.
    void write(std::string_view path, std::string_view content, bool create_dirs,
               std::optional<mode_t> mode) const;
    // The raw stat payload (isDir, isSymlink, symlinkTarget, mode, size, modifiedTime, name,
    // path). Throws PlaneError 404 when missing.
    boost::json::object stat(std::string_view path) const;
    // {"path", "entries"} one level deep. Throws PlaneError 404 / 400 (not a directory).
    boost::json::object list(std::string_view path) const;
    // mkdir -p as root.
    void mkdir(std::string_view path) const;
    // Removes a path (a final link is unlinked). A non-empty directory needs `recursive`.
    void remove(std::string_view path, bool recursive) const;

  private:
    int root_;
    FileOwner owner_;
};

}  // namespace maf_sandbox::emulator
