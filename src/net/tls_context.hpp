// Internal: building Asio SSL contexts. Kept out of public headers so only src/net sees asio::ssl.
#pragma once

#include <boost/asio/ssl/context.hpp>
#include <optional>
#include <string>

#include "maf_sandbox/net/tls.hpp"

namespace maf_sandbox::net::detail {

// Verifying client context: system store (optional), plus the CA file and/or PEM text.
boost::asio::ssl::context make_client_context(const std::optional<std::string>& ca_file,
                                              const std::optional<std::string>& ca_pem,
                                              bool use_system_store);

// Server context presenting `credentials`; TLS 1.2 and newer.
boost::asio::ssl::context make_server_context(const PemCredentials& credentials);

}  // namespace maf_sandbox::net::detail
