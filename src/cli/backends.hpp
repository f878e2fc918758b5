// The backends the CLI can build by name. Every command that acquires a sandbox builds its backend
// here and then goes through a SandboxRouter, never around it.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "maf_sandbox/core/sandbox.hpp"
#include "maf_sandbox/local/local_backend.hpp"

namespace CLI {
class App;
}

namespace maf_sandbox::cli {

// A fresh backend for `name`. Throws InvalidArgument naming the known backends for any other name.
// The acas backend reads its settings from the environment (ACAS_SANDBOX_*) here.
std::shared_ptr<maf_sandbox::SandboxBackend> make_backend(const std::string& name);

// Settings of backends that need more than a name. Every unset field falls back to its
// environment variable.
struct BackendOptions {
    std::string endpoint;         // --endpoint, ACAS_SANDBOX_ENDPOINT
    std::string subscription_id;  // --subscription-id, ACAS_SANDBOX_SUBSCRIPTION_ID
    std::string resource_group;   // --resource-group, ACAS_SANDBOX_RESOURCE_GROUP
    std::string sandbox_group;    // --sandbox-group, ACAS_SANDBOX_GROUP
    std::string registry;         // --registry, ACAS_SANDBOX_REGISTRY
    std::string ca_file;          // --ca-file, ACAS_SANDBOX_CA_FILE
    std::string token;            // --token, ACAS_SANDBOX_TOKEN (never logged)
    bool emulator = false;        // --emulator (implied by a loopback endpoint)
};

// Adds --endpoint, --subscription-id, --resource-group, --sandbox-group, --registry, --ca-file,
// --token and --emulator to `command`.
void add_backend_options(CLI::App& command, BackendOptions& options);

std::shared_ptr<maf_sandbox::SandboxBackend> make_backend(const std::string& name,
                                                          const BackendOptions& options);

// The local backend's config for the CLI's limit flags (unset: the backend's defaults), with the
// egress operator switches from the environment (tests' hosts file; never from a spec).
local::LocalBackendConfig local_backend_config(std::optional<std::uint64_t> memory_bytes,
                                               std::optional<std::uint64_t> pids,
                                               std::optional<std::uint64_t> disk_bytes);

// The image a command should default to for `backend`: "host" for an acas backend in emulator
// mode (the emulator's runtime image), "ubuntu" for the real service, empty otherwise.
std::string default_image_for(const maf_sandbox::SandboxBackend& backend);

// Refuses, before anything is served, an image `backend` does not have: a local image that is not
// in the store, or an ACAS catalogue name (no tag) that the service's catalogue lacks. Throws
// InvalidArgument naming the images there are. Other forms are left to the first acquire, which
// names the fix. Runs the ACAS listing on the caller's executor (the backend's clients live there).
Task<void> check_image(maf_sandbox::SandboxBackend& backend, const std::string& image);

}  // namespace maf_sandbox::cli
