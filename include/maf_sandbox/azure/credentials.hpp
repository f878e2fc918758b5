// The token sources of the default chain (environment client secret and client certificate,
// workload identity, managed identity through IMDS or IDENTITY_ENDPOINT, Azure CLI), a static
// token for emulators and tests, a cache that refreshes before expiry, and the chain itself.
//
// Every network source talks to an endpoint that can be overridden (options or environment), so
// tests point them at a loopback server and never contact an outside address. Plain http is
// accepted only for loopback endpoints and for IMDS (which is plain http by design).
#pragma once

#include <boost/asio/any_io_executor.hpp>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "maf_sandbox/azure/credential.hpp"
#include "maf_sandbox/core/types.hpp"

namespace spdlog {
class logger;
}

namespace maf_sandbox::azure {

inline constexpr std::string_view kDefaultAuthorityHost = "https://login.microsoftonline.com";
inline constexpr std::string_view kDefaultImdsEndpoint =
    "http://169.254.169.254/metadata/identity/oauth2/token";

struct CredentialOptions {
    EnvironmentReader environment = process_environment();
    // The Entra authority; unset reads AZURE_AUTHORITY_HOST, then kDefaultAuthorityHost.
    std::optional<std::string> authority_host;
    // The full IMDS token URL; unset reads MAF_SANDBOX_IMDS_ENDPOINT, then
    // AZURE_POD_IDENTITY_AUTHORITY_HOST (+ the IMDS path), then kDefaultImdsEndpoint.
    std::optional<std::string> imds_endpoint;
    // Extra trust anchors (PEM file) for https token endpoints.
    std::optional<std::string> ca_file;
    Seconds request_timeout{30.0};
    // How long the chain waits for IMDS before deciding there is none.
    Seconds imds_probe_timeout{2.0};
    // Bound on one `az account get-access-token` run.
    Seconds cli_timeout{20.0};
    // The Azure CLI program, searched on the environment's PATH when it has no slash.
    std::string az_program = "az";
    std::shared_ptr<spdlog::logger> log;
};

// A fixed token (CLI --token or ACAS_SANDBOX_TOKEN). Expires far in the future; the token is
// never logged and never part of a message. Throws InvalidArgument when empty.
std::shared_ptr<TokenCredential> make_static_token_credential(std::string token);

// Client secret: POST {authority}/{tenant}/oauth2/v2.0/token with grant client_credentials.
std::shared_ptr<TokenCredential> make_client_secret_credential(
    boost::asio::any_io_executor executor, std::string tenant_id, std::string client_id,
    std::string client_secret, CredentialOptions options = {});

// Client certificate: a JWT assertion (RS256, x5t header) signed with the key in a PEM file that
// also holds the certificate. Throws InvalidArgument when the file does not hold both.
std::shared_ptr<TokenCredential> make_client_certificate_credential(
    boost::asio::any_io_executor executor, std::string tenant_id, std::string client_id,
    std::string pem_path, CredentialOptions options = {});

// AZURE_TENANT_ID + AZURE_CLIENT_ID with AZURE_CLIENT_SECRET or AZURE_CLIENT_CERTIFICATE_PATH.
// get_token throws CredentialUnavailable when those are not set.
std::shared_ptr<TokenCredential> make_environment_credential(boost::asio::any_io_executor executor,
                                                             CredentialOptions options = {});

// AZURE_FEDERATED_TOKEN_FILE (re-read on every request) exchanged as a client assertion for
// AZURE_CLIENT_ID in AZURE_TENANT_ID. Unavailable when any of the three is unset.
std::shared_ptr<TokenCredential> make_workload_identity_credential(
    boost::asio::any_io_executor executor, CredentialOptions options = {});

// IDENTITY_ENDPOINT + IDENTITY_HEADER (App Service, Container Apps) when both are set, otherwise
// IMDS. `client_id` selects a user-assigned identity (else AZURE_CLIENT_ID when set). An IMDS
// that does not answer within imds_probe_timeout makes the credential unavailable.
std::shared_ptr<TokenCredential> make_managed_identity_credential(
    boost::asio::any_io_executor executor, CredentialOptions options = {},
    std::optional<std::string> client_id = std::nullopt);

// `az account get-access-token --resource <scope without /.default> -o json`, run as a child
// process bounded by cli_timeout (killed when it overruns). No `az` or no login: unavailable.
std::shared_ptr<TokenCredential> make_azure_cli_credential(boost::asio::any_io_executor executor,
                                                           CredentialOptions options = {});

// Tries each source in order: CredentialUnavailable moves on, anything else stops the chain. Once
// a source answered, later calls go straight to it. Throws CredentialUnavailable listing every
// source's reason when none is available.
std::shared_ptr<TokenCredential> make_chained_credential(
    std::vector<std::shared_ptr<TokenCredential>> sources);

// Caches tokens per scope set and fetches a new one at refresh_on (default: five minutes before
// expiry, or half the lifetime for short tokens). Concurrent callers share one fetch. When a
// refresh fails while the cached token is still valid, the cached token is returned.
std::shared_ptr<TokenCredential> make_caching_credential(std::shared_ptr<TokenCredential> inner);

// Environment, workload identity, managed identity, Azure CLI, behind one cache.
std::shared_ptr<TokenCredential> make_default_azure_credential(
    boost::asio::any_io_executor executor, CredentialOptions options = {});

}  // namespace maf_sandbox::azure
