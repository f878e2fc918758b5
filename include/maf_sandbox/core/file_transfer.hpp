// File transfer through the guest's own shell (docs/protocol.md 5.9), for backends whose only
// channel into the guest is exec: content goes in as base64 chunks into a staged sibling that is
// renamed over the target, so a reader never sees a half-written file.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "maf_sandbox/core/sandbox.hpp"
#include "maf_sandbox/core/types.hpp"

namespace maf_sandbox {

// Content bytes per guest command; 48 KiB of content is 64 KiB of base64 on one command line.
inline constexpr std::size_t kShellChunkBytes = 48 * 1024;
// Output budget of every transfer command: they print nothing but a short error.
inline constexpr std::uint64_t kShellCommandOutputBytes = 4096;
// What the guest must provide.
inline constexpr const char* kShellUtilities[] = {"sh", "mkdir", "mv", "rm", "base64", "wc"};

// Writes `content` to `path` (relative to `working_directory`, which is the commands' cwd) with
// 2 + ceil(size / chunk_bytes) guest commands: mkdir -p of the parent, a directory check and the
// truncation of `<parent>/.maf-<32 hex>.part`; one `printf %s <base64> | base64 -d >>` per chunk;
// a second directory check and `mv -f` onto the target. A file under chunk_bytes costs 3 commands.
//
// `timeout` bounds the whole sequence. Refusals and failures:
//  - a NUL, CR or LF in the path, or a leaf of "", "." or "..": SandboxFileRefused(invalid_path),
//    before any command runs;
//  - the deadline passing between commands: the staged file is removed (own 10 s budget) and
//    SandboxShellTransferFailed is thrown (the sandbox is whole);
//  - a command exiting non-zero: the staged file is removed, then the last stderr line decides:
//    "Permission denied" permission_denied, "Is a directory" is_directory, "No such file or
//    directory" and "Not a directory" not_found, "File exists" invalid_path (all
//    SandboxFileRefused), anything else SandboxShellTransferFailed;
//  - a command timing out, overflowing its output budget or failing in transport, or the staged
//    file not being removable: SandboxShellTransferUnfinished (the sandbox may hold a staged file
//    and should be discarded).
// `sandbox` must outlive the task.
Task<void> write_file_over_exec(Sandbox& sandbox, std::string path, std::string content,
                                std::string working_directory, Seconds timeout,
                                std::size_t chunk_bytes = kShellChunkBytes);

// Reads a regular file through the shell in two commands: a probe (`test` for existence, link,
// directory, regular file and readability, then `wc -c`) and a `base64` read. Throws
// SandboxFileRefused for a path refused as above, a missing file (not_found), a directory
// (is_directory), an unreadable file (permission_denied), a link or other non-regular file
// (invalid_path); SandboxTransferCapExceeded when the file is over `max_bytes` (refused, never
// truncated, also when it grew between probe and read); SandboxShellTransferFailed when the
// deadline passes between the commands or the guest's answer is malformed;
// SandboxShellTransferUnfinished when a command times out or fails in transport.
Task<std::string> read_file_over_exec(Sandbox& sandbox, std::string path,
                                      std::string working_directory, std::uint64_t max_bytes,
                                      Seconds timeout);

// Base64 (RFC 4648, padded, no line breaks) used by the transfer; decode ignores ASCII whitespace
// and throws InvalidArgument on anything else that is not base64.
std::string base64_encode(std::string_view bytes);
std::string base64_decode(std::string_view text);

}  // namespace maf_sandbox
