// Internal: how the file plane reads a `path` query. Clients written against the service send
// relative paths (`hello.txt`) and expect them to name the same file a command run without a
// workingDirectory sees under that name, so a relative path is resolved against the sandbox's
// working directory (kGuestWorkingDirectory) before the file plane, which takes absolute paths
// only, sees it. The resolution is lexical joining only: `..` and links are the guest's to
// resolve, as they are for an absolute path.
#pragma once

#include <string>
#include <string_view>

namespace maf_sandbox::emulator {

// Where exec runs when workingDirectory is omitted, and what relative file-plane paths are
// resolved against (docs/emulator.md). "/" always exists in every image.
inline constexpr const char* kGuestWorkingDirectory = "/";

// `path` when it is absolute; otherwise `working_directory` joined with it. Throws Refusal
// 400 for an empty path or one holding NUL (no file has such a name).
std::string resolve_guest_path(std::string_view path,
                               std::string_view working_directory = kGuestWorkingDirectory);

}  // namespace maf_sandbox::emulator
