// Internal: the file plane's operations as they run inside the guest-authority child
// (guest_authority.hpp): `/` is the guest's root and the process is the guest's root user, so
// following the guest's links (the service's contract) can only reach what the guest itself can.
// Each one resolves with openat2(RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS) from the root and acts on
// descriptors; metadata changes only through descriptors (fchmod on an fd, never by name), and
// every descriptor is checked before it is used: the sandbox's /proc, /sys and /dev (and any
// device node or kernel file system) are refused (a PathNotAllowed Refusal).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>

#include "file_plane.hpp"
#include "guest_authority.hpp"
#include "stage_key.hpp"

namespace maf_sandbox::emulator::inside {

ReadKind classify_read(const std::string& path);
// Opens the file for reading and hands the descriptor to `out`, with its size as the payload;
// refuses a file over `max_bytes` first.
void open_for_read(const std::string& path, std::uint64_t max_bytes, ReplyChannel& out);
// Stages the bytes under a name tagged with `key` (file_plane_staging.hpp), then renames them in.
void write(const staging::StageKey& key, const std::string& path, std::string_view content,
           bool create_dirs, std::optional<mode_t> mode);
std::string stat(const std::string& path);  // the JSON payload
// What one listing may answer; past either the listing is refused 413 ListingTooLarge.
struct ListCaps {
    std::uint64_t max_entries;
    std::uint64_t max_bytes;
};
// The JSON payload, refused while the directory is read once it passes `caps`.
std::string list(const std::string& path, const ListCaps& caps);
void mkdir(const std::string& path);
void remove(const std::string& path, bool recursive);

}  // namespace maf_sandbox::emulator::inside
