// Shared plumbing of the network credentials: endpoint checks, form encoding, the Entra token
// request and the parsers of the two token answer shapes (Entra and managed identity).
#pragma once

#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "maf_sandbox/azure/credentials.hpp"
#include "maf_sandbox/net/http_client.hpp"

namespace maf_sandbox::azure::detail {

// https, or http to a loopback host (tests). Throws InvalidArgument naming `what` otherwise.
void require_secure_endpoint(std::string_view url, std::string_view what);

// The authority host without a trailing slash (options, AZURE_AUTHORITY_HOST, default).
std::string authority_host(const CredentialOptions& options);

// "https://x/.default" -> "https://x" (managed identity and the CLI take a resource, not a scope).
std::string resource_of(const std::vector<std::string>& scopes);

std::string form_encode(const std::map<std::string, std::string>& fields);

// A client for token endpoints, trusting options.ca_file in addition to the system store.
std::unique_ptr<net::HttpClient> make_token_client(boost::asio::any_io_executor executor,
                                                   const CredentialOptions& options);

// POSTs `fields` to {authority}/{tenant}/oauth2/v2.0/token and parses the answer. A refusal
// (4xx with an Entra error body) throws AuthenticationFailed naming the error code (never the
// body's secrets); a transport failure throws AuthenticationFailed too.
Task<AccessToken> request_entra_token(net::HttpClient& client, const CredentialOptions& options,
                                      std::string_view tenant_id,
                                      std::map<std::string, std::string> fields,
                                      std::string_view source);

// {"access_token", "expires_in", "refresh_in"?} -> AccessToken. Throws AuthenticationFailed.
AccessToken parse_entra_answer(std::string_view body, std::string_view source);
// {"access_token", "expires_on" (epoch, string or number) | "expires_in"} -> AccessToken.
AccessToken parse_managed_identity_answer(std::string_view body, std::string_view source);

// Tenant ids and client ids travel in a URL path: refuse anything that is not a plain token.
void require_plain_id(std::string_view value, std::string_view what);

}  // namespace maf_sandbox::azure::detail
