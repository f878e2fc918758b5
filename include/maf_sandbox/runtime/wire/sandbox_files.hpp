// The files and programs the host and the supervisor both name: the logs a sandbox's network
// services write into its directory, and where slirp4netns is found. The supervisor writes them
// and the host reads them, so the names live here and nowhere else.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>

namespace maf_sandbox::runtime {

// The egress proxy's decision log of a sandbox (one JSON object per line; read_egress_decisions).
std::filesystem::path egress_log_path(const std::filesystem::path& sandbox_dir);

// slirp4netns's own log of an unrestricted sandbox, and its bound in bytes (RLIMIT_FSIZE).
std::filesystem::path slirp_log_path(const std::filesystem::path& sandbox_dir);
inline constexpr std::uint64_t kSlirpLogLimit = 64 << 10;

// slirp4netns in the system's directories only: the supervisor runs with an empty environment,
// and a PATH anybody else controls must never pick the program a root process starts.
std::optional<std::filesystem::path> find_slirp4netns();

}  // namespace maf_sandbox::runtime
