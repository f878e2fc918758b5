// AcasSandboxConfig: where the backend's sandboxes live, how long its operations may take, and
// which identity it uses. validate() refuses a config that could not address the service safely.
#pragma once

#include <boost/asio/any_io_executor.hpp>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "maf_sandbox/acas/client.hpp"
#include "maf_sandbox/azure/credential.hpp"
#include "maf_sandbox/azure/credentials.hpp"
#include "maf_sandbox/core/types.hpp"

namespace spdlog {
class logger;
}

namespace maf_sandbox::acas {

enum class AcasOperation { acquire, dispose, dispose_scope };

// What the host's resolver is asked: which operation, for which trusted conversation and key.
struct AcasCredentialRequest {
    AcasOperation operation = AcasOperation::acquire;
    std::string scope;
    std::string thread_id;
    std::optional<SandboxKey> key;  // set for acquire and dispose
};

// The host's answer. Equal (authority, generation) pairs assert equivalent grants and share
// clients; a new generation isolates authentication state. The factory creates a fresh credential
// on the executor it is given (its owning io_context); the backend owns it.
struct AcasCredentialBinding {
    std::string authority;
    std::string generation;
    std::function<std::shared_ptr<azure::TokenCredential>(boost::asio::any_io_executor)>
        create_credential;
};

using AcasCredentialResolver = std::function<Task<AcasCredentialBinding>(AcasCredentialRequest)>;

// The transfer ceilings this backend declares (per direction).
inline constexpr TransferLimits kAcasTransferLimits{32 * kMiB, 128 * kMiB, 128};

struct AcasSandboxConfig {
    std::string endpoint;  // https://management.<region>.azuredevcompute.io, no trailing slash
    std::string subscription_id;
    std::string resource_group;
    std::string sandbox_group;
    std::string registry;                // login server that qualifies repo:tag images
    std::optional<std::string> ca_file;  // extra trust (the emulator's ca.pem)
    // A fixed bearer token (CLI --token / ACAS_SANDBOX_TOKEN); never logged.
    std::optional<std::string> token;
    // Serve an acas-emulator: declare the rung its header names. Implied by a loopback endpoint.
    bool emulator = false;

    int auto_suspend_seconds = 60;
    int auto_delete_seconds = 600;
    Seconds read_timeout{120.0};    // file reads, removals, write-over-exec transfers
    Seconds create_timeout{300.0};  // create until Running
    Seconds delete_timeout{300.0};  // delete until gone
    Seconds resume_timeout{120.0};  // warm reuse
    Seconds probe_timeout{30.0};    // acquire-time probes
    Seconds poll_interval{3.0};
    std::uint64_t exec_output_limit_bytes = kMiB;  // per stream
    SandboxLimits limits{kAcasTransferLimits, kAcasTransferLimits};
    RetryPolicy retry;

    // Unset: the static token when given, else DefaultAzureCredential per io_context.
    AcasCredentialResolver credential_resolver;
    azure::CredentialOptions credential_options;
    std::size_t max_clients_per_loop = 32;
    Seconds client_wait{30.0};
    Seconds client_close{30.0};
    // A pooled client unused this long is closed the next time its io_context leases (idle
    // eviction closes clients only: sandboxes and held handles are untouched).
    Seconds client_idle{300.0};
    // How long an image's completed removal-probe refusal refuses a cold acquire before any
    // create (README: 60 s from the completed probe; refusals served from it never extend it).
    Seconds image_hint{60.0};

    bool silence_preview_warning = false;
    std::shared_ptr<spdlog::logger> log;

    // Throws InvalidArgument: endpoint not https or with a trailing slash; an id empty or holding
    // '/', '\', '..' or NUL; non-positive timeouts or intervals; a zero client cap.
    void validate() const;
    // emulator, or an endpoint whose host is loopback.
    bool emulator_mode() const;
};

}  // namespace maf_sandbox::acas
