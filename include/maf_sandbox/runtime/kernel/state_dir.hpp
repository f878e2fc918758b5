// The one trust rule for the directories the runtime and the emulator keep records in.
#pragma once

#include <sys/types.h>

#include <filesystem>
#include <string_view>

#include "maf_sandbox/runtime/kernel/unique_fd.hpp"

namespace maf_sandbox::runtime {

// What a refusal suggests when the caller has no better default to name.
inline constexpr std::string_view kStateDirAdvice = "or the default /var/lib/maf-sandbox";

// Opens the state directory `path`, making it (and missing ancestors, 0755) if needed, and
// returns an O_DIRECTORY descriptor to it. Records in a state directory are acted on as root
// (processes signalled, cgroups and directories removed), so the directory must be one no other
// user could have written: it refuses, with SystemError(EPERM), a directory not owned by the
// running user, and any directory on the way that is owned by a user other than root or the
// running user, or that others can write (a sticky one such as /tmp excepted: nobody else can
// rename or remove what we own in it). It refuses a state directory that is itself a symbolic
// link (ELOOP); a link on the way is followed only when root or the running user owns it, and
// where it leads is checked the same way. A looser mode than `mode` on a directory we own
// (create_directories under the umask, an older version) is tightened to its mode & `mode`
// through the descriptor. `advice` ends the refusal's remedy ("or the default ...").
UniqueFd open_trusted_state_dir(const std::filesystem::path& path, mode_t mode,
                                std::string_view advice = kStateDirAdvice);

}  // namespace maf_sandbox::runtime
