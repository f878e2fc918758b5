// Each credential against a local fake: a token endpoint on loopback, IDENTITY_ENDPOINT and IMDS
// on loopback, a fake `az` on PATH. Nothing here contacts an outside address.
#include <gtest/gtest.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rsa.h>
#include <openssl/x509.h>

#include <atomic>
#include <mutex>

#include "loopback.hpp"
#include "maf_sandbox/azure/credentials.hpp"

namespace maf_sandbox::azure {
namespace {

using maf_sandbox::testing::drive;
using maf_sandbox::testing::LoopbackServer;
using maf_sandbox::testing::TempDir;

const std::vector<std::string> kScopes{std::string(kDataPlaneScope)};

struct Recorded {
    std::mutex mutex;
    std::vector<net::HttpRequest> requests;
    void add(const net::HttpRequest& r) {
        std::lock_guard lock(mutex);
        requests.push_back(r);
    }
    net::HttpRequest last() {
        std::lock_guard lock(mutex);
        return requests.back();
    }
    std::size_t count() {
        std::lock_guard lock(mutex);
        return requests.size();
    }
};

net::HttpResponse json_answer(int status, std::string body) {
    net::HttpResponse response;
    response.status = status;
    response.headers.set("Content-Type", "application/json");
    response.body = std::move(body);
    return response;
}

net::HttpHandler recording(Recorded& recorded, int status, std::string body) {
    return [&recorded, status, body](net::HttpRequest request) -> Task<net::HttpResponse> {
        recorded.add(request);
        co_return json_answer(status, body);
    };
}

CredentialOptions options_with(std::map<std::string, std::string> env) {
    CredentialOptions options;
    options.environment = environment_from(std::move(env));
    return options;
}

TEST(StaticTokenCredential, ReturnsTheTokenAndRefusesAnEmptyOne) {
    auto credential = make_static_token_credential("tok-123");
    const auto token = run_blocking(credential->get_token(kScopes));
    EXPECT_EQ(token.token, "tok-123");
    EXPECT_GT(token.expires_on, WallClock::now() + std::chrono::hours(24));
    EXPECT_THROW(make_static_token_credential(""), InvalidArgument);
}

TEST(ClientSecretCredential, PostsTheClientCredentialsFormToTheOverriddenAuthority) {
    Recorded recorded;
    LoopbackServer server(recording(
        recorded, 200, R"({"token_type":"Bearer","expires_in":3600,"access_token":"at-1"})"));
    boost::asio::io_context io;
    auto options = options_with({{"AZURE_AUTHORITY_HOST", server.origin()}});
    auto credential =
        make_client_secret_credential(io.get_executor(), "tenant-1", "client-1", "s3cret", options);
    const auto token = drive(io, credential->get_token(kScopes));
    EXPECT_EQ(token.token, "at-1");
    const auto request = recorded.last();
    EXPECT_EQ(request.method, "POST");
    EXPECT_EQ(request.target, "/tenant-1/oauth2/v2.0/token");
    EXPECT_NE(request.body.find("grant_type=client_credentials"), std::string::npos);
    EXPECT_NE(request.body.find("client_id=client-1"), std::string::npos);
    EXPECT_NE(request.body.find("client_secret=s3cret"), std::string::npos);
    EXPECT_NE(request.body.find("scope=https%3A%2F%2Fdynamicsessions.io%2F.default"),
              std::string::npos);
}

TEST(ClientSecretCredential, ARefusalNamesTheErrorCodeButNeverTheSecret) {
    Recorded recorded;
    LoopbackServer server(
        recording(recorded, 401, R"({"error":"invalid_client","error_description":"bad s3cret"})"));
    boost::asio::io_context io;
    auto credential =
        make_client_secret_credential(io.get_executor(), "tenant-1", "client-1", "s3cret",
                                      options_with({{"AZURE_AUTHORITY_HOST", server.origin()}}));
    try {
        drive(io, credential->get_token(kScopes));
        FAIL() << "expected AuthenticationFailed";
    } catch (const AuthenticationFailed& e) {
        EXPECT_NE(std::string(e.what()).find("invalid_client"), std::string::npos);
        EXPECT_EQ(std::string(e.what()).find("s3cret"), std::string::npos);
    }
}

TEST(ClientSecretCredential, RefusesAPlainHttpAuthorityThatIsNotLoopback) {
    boost::asio::io_context io;
    auto credential = make_client_secret_credential(
        io.get_executor(), "tenant-1", "client-1", "s",
        options_with({{"AZURE_AUTHORITY_HOST", "http://login.example.invalid"}}));
    EXPECT_THROW(drive(io, credential->get_token(kScopes)), InvalidArgument);
}

TEST(EnvironmentCredential, IsUnavailableWithoutItsVariablesAndUsesTheSecretWhenSet) {
    boost::asio::io_context io;
    auto missing = make_environment_credential(io.get_executor(), options_with({}));
    EXPECT_THROW(drive(io, missing->get_token(kScopes)), CredentialUnavailable);

    Recorded recorded;
    LoopbackServer server(
        recording(recorded, 200, R"({"expires_in":3600,"access_token":"env-tok"})"));
    auto present = make_environment_credential(
        io.get_executor(), options_with({{"AZURE_AUTHORITY_HOST", server.origin()},
                                         {"AZURE_TENANT_ID", "t"},
                                         {"AZURE_CLIENT_ID", "c"},
                                         {"AZURE_CLIENT_SECRET", "s"}}));
    EXPECT_EQ(drive(io, present->get_token(kScopes)).token, "env-tok");
}

// An RSA key and a self-signed certificate in one PEM, made here so the test owns its key.
std::string rsa_pem_with_certificate() {
    EVP_PKEY* key = EVP_RSA_gen(2048);
    X509* cert = X509_new();
    X509_set_version(cert, 2);
    ASN1_INTEGER_set(X509_get_serialNumber(cert), 1);
    X509_gmtime_adj(X509_getm_notBefore(cert), 0);
    X509_gmtime_adj(X509_getm_notAfter(cert), 3600);
    X509_set_pubkey(cert, key);
    X509_NAME_add_entry_by_txt(X509_get_subject_name(cert), "CN", MBSTRING_ASC,
                               reinterpret_cast<const unsigned char*>("maf-test"), -1, -1, 0);
    X509_set_issuer_name(cert, X509_get_subject_name(cert));
    X509_sign(cert, key, EVP_sha256());
    BIO* bio = BIO_new(BIO_s_mem());
    PEM_write_bio_PrivateKey(bio, key, nullptr, nullptr, 0, nullptr, nullptr);
    PEM_write_bio_X509(bio, cert);
    char* data = nullptr;
    const long size = BIO_get_mem_data(bio, &data);
    std::string pem(data, static_cast<std::size_t>(size));
    BIO_free(bio);
    X509_free(cert);
    EVP_PKEY_free(key);
    return pem;
}

TEST(ClientCertificateCredential, PresentsAnRs256AssertionWithTheThumbprint) {
    TempDir dir;
    const auto pem = dir.write("client.pem", rsa_pem_with_certificate());
    Recorded recorded;
    LoopbackServer server(
        recording(recorded, 200, R"({"expires_in":3600,"access_token":"cert-tok"})"));
    boost::asio::io_context io;
    auto credential = make_environment_credential(
        io.get_executor(), options_with({{"AZURE_AUTHORITY_HOST", server.origin()},
                                         {"AZURE_TENANT_ID", "t"},
                                         {"AZURE_CLIENT_ID", "c"},
                                         {"AZURE_CLIENT_CERTIFICATE_PATH", pem}}));
    EXPECT_EQ(drive(io, credential->get_token(kScopes)).token, "cert-tok");
    const auto body = recorded.last().body;
    EXPECT_NE(body.find("client_assertion_type=urn%3Aietf%3Aparams%3Aoauth%3Aclient-assertion-type%"
                        "3Ajwt-bearer"),
              std::string::npos);
    const auto at = body.find("client_assertion=");
    ASSERT_NE(at, std::string::npos);
    auto assertion = body.substr(at + 17);
    assertion = assertion.substr(0, assertion.find('&'));
    EXPECT_EQ(std::count(assertion.begin(), assertion.end(), '.'), 2);
    EXPECT_EQ(body.find("client_secret"), std::string::npos);
}

TEST(WorkloadIdentityCredential, ExchangesTheFederatedTokenFileReReadOnEveryRequest) {
    TempDir dir;
    const auto file = dir.write("token", "federated-1\n");
    Recorded recorded;
    LoopbackServer server(
        recording(recorded, 200, R"({"expires_in":3600,"access_token":"wi-tok"})"));
    boost::asio::io_context io;
    auto credential = make_workload_identity_credential(
        io.get_executor(), options_with({{"AZURE_AUTHORITY_HOST", server.origin()},
                                         {"AZURE_TENANT_ID", "t"},
                                         {"AZURE_CLIENT_ID", "c"},
                                         {"AZURE_FEDERATED_TOKEN_FILE", file}}));
    EXPECT_EQ(drive(io, credential->get_token(kScopes)).token, "wi-tok");
    EXPECT_NE(recorded.last().body.find("client_assertion=federated-1"), std::string::npos);
    dir.write("token", "federated-2");
    drive(io, credential->get_token(kScopes));
    EXPECT_NE(recorded.last().body.find("client_assertion=federated-2"), std::string::npos);

    auto unconfigured = make_workload_identity_credential(io.get_executor(), options_with({}));
    EXPECT_THROW(drive(io, unconfigured->get_token(kScopes)), CredentialUnavailable);
}

TEST(ManagedIdentityCredential, UsesIdentityEndpointWithItsHeaderAndResource) {
    Recorded recorded;
    LoopbackServer server(
        recording(recorded, 200, R"({"access_token":"mi-tok","expires_on":"4102444800"})"));
    boost::asio::io_context io;
    auto credential = make_managed_identity_credential(
        io.get_executor(), options_with({{"IDENTITY_ENDPOINT", server.origin() + "/msi/token"},
                                         {"IDENTITY_HEADER", "hdr-1"}}));
    const auto token = drive(io, credential->get_token(kScopes));
    EXPECT_EQ(token.token, "mi-tok");
    EXPECT_EQ(token.expires_on, WallClock::time_point(std::chrono::seconds(4102444800)));
    const auto request = recorded.last();
    EXPECT_EQ(request.headers.get("X-IDENTITY-HEADER"), "hdr-1");
    EXPECT_NE(request.target.find("api-version=2019-08-01"), std::string::npos);
    EXPECT_NE(request.target.find("resource=https%3A%2F%2Fdynamicsessions.io"), std::string::npos);
}

TEST(ManagedIdentityCredential, AsksTheOverriddenImdsWithTheMetadataHeader) {
    Recorded recorded;
    LoopbackServer server(
        recording(recorded, 200, R"({"access_token":"imds-tok","expires_in":"3600"})"));
    boost::asio::io_context io;
    CredentialOptions options = options_with({});
    options.imds_endpoint = server.origin() + "/metadata/identity/oauth2/token";
    auto credential = make_managed_identity_credential(io.get_executor(), options);
    EXPECT_EQ(drive(io, credential->get_token(kScopes)).token, "imds-tok");
    EXPECT_EQ(recorded.last().headers.get("Metadata"), "true");
    EXPECT_NE(recorded.last().target.find("api-version=2018-02-01"), std::string::npos);
}

TEST(ManagedIdentityCredential, IsUnavailableWhenImdsHasNoIdentityOrDoesNotAnswer) {
    Recorded recorded;
    LoopbackServer server(recording(recorded, 400, R"({"error":"invalid_request"})"));
    boost::asio::io_context io;
    CredentialOptions options = options_with({});
    options.imds_endpoint = server.origin() + "/metadata/identity/oauth2/token";
    auto no_identity = make_managed_identity_credential(io.get_executor(), options);
    EXPECT_THROW(drive(io, no_identity->get_token(kScopes)), CredentialUnavailable);

    // A loopback port nobody listens on stands for "no IMDS on this machine".
    CredentialOptions silent = options_with({});
    silent.imds_endpoint = "http://127.0.0.1:9/metadata/identity/oauth2/token";
    silent.imds_probe_timeout = Seconds{0.5};
    auto absent = make_managed_identity_credential(io.get_executor(), silent);
    EXPECT_THROW(drive(io, absent->get_token(kScopes)), CredentialUnavailable);
}

struct FakeAz {
    TempDir dir;
    explicit FakeAz(const std::string& body) { dir.write("az", "#!/bin/sh\n" + body, 0755); }
    CredentialOptions options(Seconds timeout = Seconds{10.0}) const {
        auto o = options_with({{"PATH", dir.path().string()}});
        o.cli_timeout = timeout;
        return o;
    }
};

TEST(AzureCliCredential, RunsAzAccountGetAccessTokenForTheResource) {
    FakeAz az(
        "echo \"$@\" > \"$(dirname \"$0\")/args\"\n"
        "echo "
        "'{\"accessToken\":\"cli-tok\",\"expires_on\":4102444800,\"tokenType\":\"Bearer\"}'\n");
    boost::asio::io_context io;
    auto credential = make_azure_cli_credential(io.get_executor(), az.options());
    const auto token = drive(io, credential->get_token(kScopes));
    EXPECT_EQ(token.token, "cli-tok");
    EXPECT_EQ(token.expires_on, WallClock::time_point(std::chrono::seconds(4102444800)));
    std::ifstream args(az.dir.path() / "args");
    std::string line;
    std::getline(args, line);
    EXPECT_EQ(line, "account get-access-token --resource https://dynamicsessions.io -o json");
}

TEST(AzureCliCredential, IsUnavailableWithoutAzOrWithoutALogin) {
    boost::asio::io_context io;
    TempDir empty;
    auto no_az = make_azure_cli_credential(io.get_executor(),
                                           options_with({{"PATH", empty.path().string()}}));
    EXPECT_THROW(drive(io, no_az->get_token(kScopes)), CredentialUnavailable);

    FakeAz logged_out("echo \"ERROR: Please run 'az login' to setup account.\" >&2; exit 1\n");
    auto credential = make_azure_cli_credential(io.get_executor(), logged_out.options());
    EXPECT_THROW(drive(io, credential->get_token(kScopes)), CredentialUnavailable);
}

TEST(AzureCliCredential, AnAzThatOverrunsItsDeadlineIsKilled) {
    FakeAz slow("sleep 30\n");
    boost::asio::io_context io;
    auto credential = make_azure_cli_credential(io.get_executor(), slow.options(Seconds{0.3}));
    const auto started = std::chrono::steady_clock::now();
    EXPECT_THROW(drive(io, credential->get_token(kScopes)), Timeout);
    EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::seconds(5));
}

class CountingCredential : public TokenCredential {
  public:
    explicit CountingCredential(std::chrono::seconds lifetime, bool fail_after_first = false)
        : lifetime_(lifetime), fail_after_first_(fail_after_first) {}
    std::string_view name() const override { return "Counting"; }
    Task<AccessToken> get_token(std::vector<std::string>) override {
        const int n = ++calls;
        if (fail_after_first_ && n > 1)
            throw AuthenticationFailed("refresh failed");
        co_return AccessToken{"tok-" + std::to_string(n), WallClock::now() + lifetime_,
                              std::nullopt};
    }
    std::atomic<int> calls{0};

  private:
    std::chrono::seconds lifetime_;
    bool fail_after_first_;
};

TEST(CachingCredential, ServesACachedTokenUntilItsRefreshPoint) {
    auto inner = std::make_shared<CountingCredential>(std::chrono::hours(1));
    auto cached = make_caching_credential(inner);
    EXPECT_EQ(run_blocking(cached->get_token(kScopes)).token, "tok-1");
    EXPECT_EQ(run_blocking(cached->get_token(kScopes)).token, "tok-1");
    EXPECT_EQ(inner->calls, 1);
}

TEST(CachingCredential, RefreshesBeforeExpiryAndKeepsAValidTokenWhenRefreshFails) {
    // Two seconds of life: the refresh point is at half-life.
    auto inner = std::make_shared<CountingCredential>(std::chrono::seconds(2), true);
    auto cached = make_caching_credential(inner);
    EXPECT_EQ(run_blocking(cached->get_token(kScopes)).token, "tok-1");
    std::this_thread::sleep_for(std::chrono::milliseconds(1200));
    EXPECT_EQ(run_blocking(cached->get_token(kScopes)).token,
              "tok-1");  // refresh failed, still valid
    EXPECT_EQ(inner->calls, 2);
    std::this_thread::sleep_for(std::chrono::milliseconds(1000));
    EXPECT_THROW(run_blocking(cached->get_token(kScopes)), AuthenticationFailed);
}

TEST(ChainedCredential, SkipsUnavailableSourcesAndStopsAtARealFailure) {
    boost::asio::io_context io;
    auto unavailable = make_environment_credential(io.get_executor(), options_with({}));
    auto good = std::make_shared<CountingCredential>(std::chrono::hours(1));
    auto chain = make_chained_credential({unavailable, good});
    EXPECT_EQ(drive(io, chain->get_token(kScopes)).token, "tok-1");

    auto failing = std::make_shared<CountingCredential>(std::chrono::hours(1), true);
    drive(io, failing->get_token(kScopes));  // first call succeeds, later ones fail
    auto never = std::make_shared<CountingCredential>(std::chrono::hours(1));
    auto stopping = make_chained_credential({failing, never});
    EXPECT_THROW(drive(io, stopping->get_token(kScopes)), AuthenticationFailed);
    EXPECT_EQ(never->calls, 0);

    auto none = make_chained_credential({unavailable});
    EXPECT_THROW(drive(io, none->get_token(kScopes)), CredentialUnavailable);
}

TEST(DefaultAzureCredential, FallsThroughToTheAzureCliWhenNothingElseIsConfigured) {
    FakeAz az("echo '{\"accessToken\":\"default-cli\",\"expires_on\":4102444800}'\n");
    boost::asio::io_context io;
    auto options = az.options();
    options.imds_endpoint = "http://127.0.0.1:9/metadata/identity/oauth2/token";
    options.imds_probe_timeout = Seconds{0.5};
    auto credential = make_default_azure_credential(io.get_executor(), options);
    EXPECT_EQ(drive(io, credential->get_token(kScopes)).token, "default-cli");
}

}  // namespace
}  // namespace maf_sandbox::azure
