// Finding the supervisor executable the host launches for each sandbox.
#include <cstdlib>

#include "maf_sandbox/core/errors.hpp"
#include "maf_sandbox/runtime/host/sandbox_process.hpp"

// Where the build put the supervisor (tests and the CLI run from the build tree).
#ifndef MAF_SANDBOX_SUPERVISOR_BUILD_PATH
#define MAF_SANDBOX_SUPERVISOR_BUILD_PATH ""
#endif

namespace maf_sandbox::runtime {

namespace fs = std::filesystem;

fs::path supervisor_executable() {
    constexpr const char* kName = "maf-sandbox-supervisor";
    std::error_code ec;
    if (const char* env = std::getenv("MAF_SANDBOX_SUPERVISOR"); env != nullptr && *env != '\0') {
        if (fs::exists(env, ec)) {
            return env;
        }
    }
    const auto self = fs::read_symlink("/proc/self/exe", ec);
    if (!ec && fs::exists(self.parent_path() / kName, ec)) {
        return self.parent_path() / kName;
    }
    const fs::path built = MAF_SANDBOX_SUPERVISOR_BUILD_PATH;
    if (!built.empty() && fs::exists(built, ec)) {
        return built;
    }
    throw SandboxCapabilityNotSupported(
        "cannot find the maf-sandbox-supervisor executable; install it next to maf-sandbox or set "
        "MAF_SANDBOX_SUPERVISOR to its path");
}

}  // namespace maf_sandbox::runtime
