// Internal: the one way the emulator says no. The service, the file plane, the body checks and
// every route throw a Refusal; the HTTP face (wire_format.hpp) is the one place that turns it
// into the service's problem+json answer. It carries no HTTP types, so the service and its unit
// tests use it as they are.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace maf_sandbox::emulator {

struct Refusal {
    int status;           // the HTTP status the face answers with
    std::string code;     // the problem's title, e.g. "SandboxNotFound"
    std::string message;  // the problem's detail, quoted back to the client
    int error_code = 0;   // the body's errorCode; 0 means the status itself
    // Set only for the service's model-binding failures, answered as {title, status, errors}
    // with one message list per JSON path instead of a detail.
    std::map<std::string, std::vector<std::string>> field_errors = {};
    int retry_after_s = 0;  // when set, answered with Retry-After (a 429 to wait out)
};

// The title the service gives a body that fails its model's checks.
inline constexpr const char* kValidationFailed = "One or more validation errors occurred.";

// The refusals more than one route or the service make, spelled once.
Refusal sandbox_not_found();
Refusal sandbox_not_running(const std::string& id);
Refusal invalid_body(std::string message);  // 400 kValidationFailed
Refusal no_such_route();                    // 404 for a path no route serves

}  // namespace maf_sandbox::emulator
