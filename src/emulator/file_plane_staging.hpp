// Internal: the names of the file plane's staged siblings
// (`.maf-stage-<masked pid>-<nonce>-<tag>`) and how a leftover one is told from a guest's file. A
// write stages its bytes beside the target and renames them over it; a crash of the emulator (or of
// the write's child) between the two leaves the staged file behind, in a directory of the guest.
// The tag is a keyed MAC of the pid and nonce under the state directory's secret (stage_key.hpp),
// which no guest can read, so a name a guest makes up never verifies; only one whose writer process
// is gone is a leftover (a write in flight in the same directory keeps its staged file). Every
// function here runs inside the guest-authority child too: system calls, arithmetic and the key's
// tag only.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "stage_key.hpp"

namespace maf_sandbox::emulator::staging {

// The staged name for a writer `pid` and `nonce`. Throws Error when the tag cannot be computed.
std::string staged_name(const StageKey& key, pid_t pid, std::uint64_t nonce);
// A staged name for this process and a fresh random nonce. Throws SystemError when the kernel's
// random source fails, Error when the tag cannot be computed.
std::string new_staged_name(const StageKey& key);
// The writer pid when `name` is a staged name made with `key`; nullopt for any other name.
std::optional<pid_t> staged_by(const StageKey& key, std::string_view name);

// Removes, in the directory `dir_fd`, every regular file whose name staged_by() verifies and
// whose writer process is gone, except `own`. Never follows a link; never fails the caller (a
// leftover it cannot remove stays for the next write). Returns how many it removed.
int sweep_leftovers(const StageKey& key, int dir_fd, std::string_view own);

}  // namespace maf_sandbox::emulator::staging
