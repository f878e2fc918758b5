// Internal to the host room: the skeleton of the `host` image, a tree of empty mount points and
// generated /etc files over which the host's own /usr and a few /etc entries are bound read-only.
#pragma once

#include <array>
#include <filesystem>

namespace maf_sandbox::runtime::host_skeleton {

// Bump when the skeleton's contents change: an old skeleton is rebuilt on next use.
inline constexpr const char* kSkeletonVersion = "1";

// Host top-level directories that are either replicated as links (merged /usr) or bound.
inline constexpr std::array<const char*, 6> kHostLibDirs{"bin",   "sbin",  "lib",
                                                         "lib32", "lib64", "libx32"};
// /etc entries bound read-only from the host when present (files or directories).
inline constexpr std::array<const char*, 4> kHostEtcBinds{
    "etc/ld.so.cache", "etc/ssl", "etc/ca-certificates", "etc/alternatives"};

// Builds the skeleton at `root` (made if missing) and records kSkeletonVersion next to it.
void build_skeleton(const std::filesystem::path& root);

}  // namespace maf_sandbox::runtime::host_skeleton
