// The shared pool's settings, kept in the state directory (<state>/pool.json) so that every
// process using it agrees on what is pooled: `maf-sandbox pool set` writes them, the CLI's one-shot
// `run` reads them to decide whether a pooled sandbox fits its flags.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>

namespace maf_sandbox::local {

struct SharedPoolSettings {
    std::size_t size = 0;
    std::string image = "host";
    // The limit flags the pool was set with (unset: the backend's defaults); a run whose flags
    // differ is not served from the pool.
    std::optional<std::uint64_t> memory_bytes, pids, disk_bytes;
    std::string signature;  // LocalBackend::pool_signature of the pooled sandboxes
    bool operator==(const SharedPoolSettings&) const = default;
};

std::filesystem::path shared_pool_file(const std::filesystem::path& state_dir);

// nullopt when no pool is set. Throws InvalidArgument when the file is not valid settings.
std::optional<SharedPoolSettings> read_shared_pool(const std::filesystem::path& state_dir);
// Atomically (temporary file, then rename). Throws SystemError.
void write_shared_pool(const std::filesystem::path& state_dir, const SharedPoolSettings& settings);
void remove_shared_pool(const std::filesystem::path& state_dir);

}  // namespace maf_sandbox::local
