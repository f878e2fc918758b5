// The two backends the demo can run on, built from its command line.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "maf_sandbox/core/sandbox.hpp"

namespace maf_sandbox::demo {

struct DemoBackendOptions {
    std::string backend = "acas";  // acas (against an acas-emulator) or local
    std::string endpoint;          // acas: the emulator's https URL
    std::string ca_file;           // acas: the emulator's ca.pem
    std::string token;             // acas: the emulator's bearer token
    std::string state_dir;         // local: the runtime's state directory
};

struct DemoBackend {
    std::shared_ptr<SandboxBackend> backend;
    // Sandboxes the service (or the local registry) still holds for the demo's conversation,
    // counted from the service itself, never from process memory.
    std::function<Task<std::size_t>()> count_remaining;
};

// Builds the backend; for acas, learns the emulator's rung first so the router's floor check is
// honest. Throws InvalidArgument for a bad option.
Task<DemoBackend> make_demo_backend(const DemoBackendOptions& options, const std::string& scope,
                                    const std::string& thread);

}  // namespace maf_sandbox::demo
