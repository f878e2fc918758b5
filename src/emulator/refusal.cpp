#include "refusal.hpp"

#include <fmt/format.h>

namespace maf_sandbox::emulator {

Refusal sandbox_not_found() {
    // The service answers errorCode 1 here, not the status.
    return Refusal{404, "SandboxNotFound", "Requested document not found.", 1};
}

Refusal sandbox_not_running(const std::string& id) {
    return Refusal{409, "SandboxNotRunning",
                   fmt::format("Sandbox '{}' is not in Running state", id)};
}

Refusal invalid_body(std::string message) {
    return Refusal{400, kValidationFailed, std::move(message)};
}

Refusal no_such_route() {
    return Refusal{404, "NotFound", "No data-plane route matches this path."};
}

}  // namespace maf_sandbox::emulator
