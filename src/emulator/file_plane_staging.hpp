// Internal: the names of the file plane's staged siblings (`.maf-stage-<pid>-<nonce>-<tag>`) and
// how a leftover one is told from a guest's file. A write stages its bytes beside the target and
// renames them over it; a crash of the emulator (or of the write's child) between the two leaves
// the staged file behind, in a directory of the guest. The tag is a keyed hash (SipHash-2-4) of
// the pid and nonce under a secret of the emulator's state directory, which no guest can read, so
// a name a guest makes up never verifies; only one whose writer process is gone is a leftover (a
// write in flight in the same directory keeps its staged file). Every function here runs inside
// the guest-authority child too: system calls and arithmetic only, no locks.
#pragma once

#include <sys/types.h>

#include <array>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

namespace maf_sandbox::emulator::staging {

using Key = std::array<std::uint8_t, 16>;

// Reads <dir>/stage.key, making it (0600, random) when absent. Without a readable or writable key
// file a random key for this process is used: its leftovers are then swept only until a restart.
void load_key(const std::filesystem::path& dir);
// The key in use (random until load_key ran).
const Key& key();

std::uint64_t siphash24(const Key& key, const std::uint8_t* data, std::size_t size);

// The staged name for a writer `pid` and `nonce`.
std::string staged_name(const Key& key, pid_t pid, std::uint64_t nonce);
// The writer pid when `name` is a staged name made with `key`; nullopt for any other name.
std::optional<pid_t> staged_by(const Key& key, std::string_view name);

// Removes, in the directory `dir_fd`, every regular file whose name staged_by() verifies and
// whose writer process is gone, except `own`. Never follows a link; never fails the caller (a
// leftover it cannot remove stays for the next write). Returns how many it removed.
int sweep_leftovers(int dir_fd, std::string_view own);

}  // namespace maf_sandbox::emulator::staging
