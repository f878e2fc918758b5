#include "maf_sandbox/runtime/wire/sandbox_files.hpp"

#include <unistd.h>

namespace maf_sandbox::runtime {

namespace fs = std::filesystem;

namespace {

constexpr const char* kSystemBinDirs[] = {"/usr/local/sbin", "/usr/local/bin", "/usr/sbin",
                                          "/usr/bin",        "/sbin",          "/bin"};

}  // namespace

fs::path egress_log_path(const fs::path& sandbox_dir) {
    return sandbox_dir / "egress.log";
}

fs::path slirp_log_path(const fs::path& sandbox_dir) {
    return sandbox_dir / "slirp4netns.log";
}

std::optional<fs::path> find_slirp4netns() {
    for (const char* dir : kSystemBinDirs) {
        const fs::path candidate = fs::path(dir) / "slirp4netns";
        if (::access(candidate.c_str(), X_OK) == 0) {
            return candidate;
        }
    }
    return std::nullopt;
}

}  // namespace maf_sandbox::runtime
