// Entra client-credential flows: client secret, client certificate, workload identity (federated
// token file), and the environment credential that picks one of the first two.
#include <fmt/format.h>

#include <fstream>
#include <sstream>

#include "client_assertion.hpp"
#include "token_service.hpp"

namespace maf_sandbox::azure {
namespace {

constexpr const char* kAssertionType = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer";

std::string scope_field(const std::vector<std::string>& scopes) {
    std::string joined;
    for (const auto& scope : scopes) {
        if (!joined.empty()) {
            joined.push_back(' ');
        }
        joined += scope;
    }
    return joined;
}

class ClientSecretCredential : public TokenCredential {
  public:
    ClientSecretCredential(boost::asio::any_io_executor executor, std::string tenant,
                           std::string client, std::string secret, CredentialOptions options)
        : tenant_(std::move(tenant)),
          client_(std::move(client)),
          secret_(std::move(secret)),
          options_(std::move(options)),
          http_(detail::make_token_client(std::move(executor), options_)) {}
    std::string_view name() const override { return "ClientSecretCredential"; }
    Task<AccessToken> get_token(std::vector<std::string> scopes) override {
        std::map<std::string, std::string> fields;
        fields["grant_type"] = "client_credentials";
        fields["client_id"] = client_;
        fields["client_secret"] = secret_;
        fields["scope"] = scope_field(scopes);
        co_return co_await detail::request_entra_token(*http_, options_, tenant_, std::move(fields),
                                                       name());
    }

  private:
    std::string tenant_, client_, secret_;
    CredentialOptions options_;
    std::unique_ptr<net::HttpClient> http_;
};

class ClientCertificateCredential : public TokenCredential {
  public:
    ClientCertificateCredential(boost::asio::any_io_executor executor, std::string tenant,
                                std::string client, std::string pem_path, CredentialOptions options)
        : tenant_(std::move(tenant)),
          client_(std::move(client)),
          signer_(detail::CertificateSigner::from_pem_file(pem_path)),
          options_(std::move(options)),
          http_(detail::make_token_client(std::move(executor), options_)) {}
    std::string_view name() const override { return "ClientCertificateCredential"; }
    Task<AccessToken> get_token(std::vector<std::string> scopes) override {
        const auto audience =
            fmt::format("{}/{}/oauth2/v2.0/token", detail::authority_host(options_), tenant_);
        std::map<std::string, std::string> fields;
        fields["grant_type"] = "client_credentials";
        fields["client_id"] = client_;
        fields["client_assertion_type"] = kAssertionType;
        fields["client_assertion"] = signer_.assertion(client_, audience);
        fields["scope"] = scope_field(scopes);
        co_return co_await detail::request_entra_token(*http_, options_, tenant_, std::move(fields),
                                                       name());
    }

  private:
    std::string tenant_, client_;
    detail::CertificateSigner signer_;
    CredentialOptions options_;
    std::unique_ptr<net::HttpClient> http_;
};

class EnvironmentCredential : public TokenCredential {
  public:
    EnvironmentCredential(boost::asio::any_io_executor executor, CredentialOptions options)
        : executor_(std::move(executor)), options_(std::move(options)) {}
    std::string_view name() const override { return "EnvironmentCredential"; }
    Task<AccessToken> get_token(std::vector<std::string> scopes) override {
        if (!inner_) {
            const auto& env = options_.environment;
            const auto tenant = env("AZURE_TENANT_ID");
            const auto client = env("AZURE_CLIENT_ID");
            const auto secret = env("AZURE_CLIENT_SECRET");
            const auto certificate = env("AZURE_CLIENT_CERTIFICATE_PATH");
            if (!tenant || !client || (!secret && !certificate)) {
                throw CredentialUnavailable(
                    "EnvironmentCredential: set AZURE_TENANT_ID, AZURE_CLIENT_ID and "
                    "AZURE_CLIENT_SECRET or AZURE_CLIENT_CERTIFICATE_PATH");
            }
            if (secret) {
                inner_ =
                    make_client_secret_credential(executor_, *tenant, *client, *secret, options_);
            } else {
                inner_ = make_client_certificate_credential(executor_, *tenant, *client,
                                                            *certificate, options_);
            }
        }
        co_return co_await inner_->get_token(std::move(scopes));
    }

  private:
    boost::asio::any_io_executor executor_;
    CredentialOptions options_;
    std::shared_ptr<TokenCredential> inner_;
};

class WorkloadIdentityCredential : public TokenCredential {
  public:
    WorkloadIdentityCredential(boost::asio::any_io_executor executor, CredentialOptions options)
        : options_(std::move(options)),
          http_(detail::make_token_client(std::move(executor), options_)) {}
    std::string_view name() const override { return "WorkloadIdentityCredential"; }
    Task<AccessToken> get_token(std::vector<std::string> scopes) override {
        const auto& env = options_.environment;
        const auto tenant = env("AZURE_TENANT_ID");
        const auto client = env("AZURE_CLIENT_ID");
        const auto file = env("AZURE_FEDERATED_TOKEN_FILE");
        if (!tenant || !client || !file) {
            throw CredentialUnavailable(
                "WorkloadIdentityCredential: set AZURE_TENANT_ID, AZURE_CLIENT_ID and "
                "AZURE_FEDERATED_TOKEN_FILE");
        }
        // Re-read every time: the platform rotates the projected token in place.
        std::ifstream stream(*file, std::ios::binary);
        std::ostringstream contents;
        contents << stream.rdbuf();
        std::string assertion = contents.str();
        while (!assertion.empty() &&
               (assertion.back() == '\n' || assertion.back() == '\r' || assertion.back() == ' ')) {
            assertion.pop_back();
        }
        if (!stream || assertion.empty()) {
            throw AuthenticationFailed(fmt::format(
                "WorkloadIdentityCredential could not read the federated token file {}; check "
                "the projected service account token",
                *file));
        }
        std::map<std::string, std::string> fields;
        fields["grant_type"] = "client_credentials";
        fields["client_id"] = *client;
        fields["client_assertion_type"] = kAssertionType;
        fields["client_assertion"] = assertion;
        fields["scope"] = scope_field(scopes);
        co_return co_await detail::request_entra_token(*http_, options_, *tenant, std::move(fields),
                                                       name());
    }

  private:
    CredentialOptions options_;
    std::unique_ptr<net::HttpClient> http_;
};

}  // namespace

std::shared_ptr<TokenCredential> make_client_secret_credential(
    boost::asio::any_io_executor executor, std::string tenant_id, std::string client_id,
    std::string client_secret, CredentialOptions options) {
    detail::require_plain_id(tenant_id, "the tenant id");
    return std::make_shared<ClientSecretCredential>(std::move(executor), std::move(tenant_id),
                                                    std::move(client_id), std::move(client_secret),
                                                    std::move(options));
}

std::shared_ptr<TokenCredential> make_client_certificate_credential(
    boost::asio::any_io_executor executor, std::string tenant_id, std::string client_id,
    std::string pem_path, CredentialOptions options) {
    detail::require_plain_id(tenant_id, "the tenant id");
    return std::make_shared<ClientCertificateCredential>(std::move(executor), std::move(tenant_id),
                                                         std::move(client_id), std::move(pem_path),
                                                         std::move(options));
}

std::shared_ptr<TokenCredential> make_environment_credential(boost::asio::any_io_executor executor,
                                                             CredentialOptions options) {
    return std::make_shared<EnvironmentCredential>(std::move(executor), std::move(options));
}

std::shared_ptr<TokenCredential> make_workload_identity_credential(
    boost::asio::any_io_executor executor, CredentialOptions options) {
    return std::make_shared<WorkloadIdentityCredential>(std::move(executor), std::move(options));
}

}  // namespace maf_sandbox::azure
