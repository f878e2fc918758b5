// Managed identity: the App Service / Container Apps endpoint (IDENTITY_ENDPOINT with
// IDENTITY_HEADER) when present, otherwise the instance metadata service.
#include <fmt/format.h>
#include <spdlog/logger.h>

#include "token_service.hpp"

namespace maf_sandbox::azure {
namespace {

constexpr std::string_view kImdsPath = "/metadata/identity/oauth2/token";

class ManagedIdentityCredential : public TokenCredential {
  public:
    ManagedIdentityCredential(boost::asio::any_io_executor executor, CredentialOptions options,
                              std::optional<std::string> client_id)
        : options_(std::move(options)),
          client_id_(client_id ? std::move(client_id) : options_.environment("AZURE_CLIENT_ID")),
          http_(detail::make_token_client(std::move(executor), options_)) {}

    std::string_view name() const override { return "ManagedIdentityCredential"; }

    Task<AccessToken> get_token(std::vector<std::string> scopes) override {
        const auto resource = detail::resource_of(scopes);
        const auto& env = options_.environment;
        const auto endpoint = env("IDENTITY_ENDPOINT");
        const auto header = env("IDENTITY_HEADER");
        net::HttpRequest request;
        request.method = "GET";
        bool probing_imds = false;
        if (endpoint && header) {
            detail::require_secure_endpoint(*endpoint, "IDENTITY_ENDPOINT");
            request.target = fmt::format("{}{}api-version=2019-08-01&resource={}", *endpoint,
                                         endpoint->find('?') == std::string::npos ? "?" : "&",
                                         net::percent_encode(resource));
            request.headers.set("X-IDENTITY-HEADER", *header);
        } else {
            request.target = fmt::format("{}?api-version=2018-02-01&resource={}", imds_endpoint(),
                                         net::percent_encode(resource));
            request.headers.set("Metadata", "true");
            probing_imds = !imds_seen_;
        }
        if (client_id_) {
            request.target += "&client_id=" + net::percent_encode(*client_id_);
        }
        net::HttpResponse response;
        try {
            const auto timeout =
                probing_imds ? options_.imds_probe_timeout : options_.request_timeout;
            response = co_await http_->send(std::move(request), net::RequestOptions{timeout, kMiB});
        } catch (const net::NetError& e) {
            if (probing_imds) {
                throw CredentialUnavailable(fmt::format(
                    "ManagedIdentityCredential: no instance metadata service answered ({})",
                    e.what()));
            }
            throw AuthenticationFailed(fmt::format(
                "ManagedIdentityCredential could not reach its token endpoint ({}); check the "
                "identity configuration of this host",
                e.what()));
        }
        if (probing_imds && (response.status == 400 || response.status == 404)) {
            // IMDS answers 400 when no identity is assigned to the machine.
            throw CredentialUnavailable(fmt::format(
                "ManagedIdentityCredential: the metadata service has no identity for this host "
                "(HTTP {})",
                response.status));
        }
        if (response.status != 200) {
            throw AuthenticationFailed(fmt::format(
                "ManagedIdentityCredential was refused (HTTP {}); check the identity assignment",
                response.status));
        }
        imds_seen_ = imds_seen_ || probing_imds;
        co_return detail::parse_managed_identity_answer(response.body, name());
    }

  private:
    std::string imds_endpoint() const {
        if (options_.imds_endpoint)
            return *options_.imds_endpoint;
        if (const auto explicit_url = options_.environment("MAF_SANDBOX_IMDS_ENDPOINT")) {
            return *explicit_url;
        }
        if (auto host = options_.environment("AZURE_POD_IDENTITY_AUTHORITY_HOST")) {
            while (!host->empty() && host->back() == '/')
                host->pop_back();
            return *host + std::string(kImdsPath);
        }
        return std::string(kDefaultImdsEndpoint);
    }

    CredentialOptions options_;
    std::optional<std::string> client_id_;
    std::unique_ptr<net::HttpClient> http_;
    bool imds_seen_ = false;
};

}  // namespace

std::shared_ptr<TokenCredential> make_managed_identity_credential(
    boost::asio::any_io_executor executor, CredentialOptions options,
    std::optional<std::string> client_id) {
    return std::make_shared<ManagedIdentityCredential>(std::move(executor), std::move(options),
                                                       std::move(client_id));
}

}  // namespace maf_sandbox::azure
