#include "maf_sandbox/azure/credentials.hpp"

namespace maf_sandbox::azure {
namespace {

class StaticTokenCredential : public TokenCredential {
  public:
    explicit StaticTokenCredential(std::string token) : token_(std::move(token)) {}
    std::string_view name() const override { return "StaticTokenCredential"; }
    Task<AccessToken> get_token(std::vector<std::string>) override {
        // A static token has no known expiry; a year keeps every cache from refreshing it.
        co_return AccessToken{token_, WallClock::now() + std::chrono::hours(24 * 365),
                              std::nullopt};
    }

  private:
    std::string token_;
};

}  // namespace

std::shared_ptr<TokenCredential> make_static_token_credential(std::string token) {
    if (token.empty()) {
        throw InvalidArgument("the static token is empty; pass --token or set ACAS_SANDBOX_TOKEN");
    }
    return std::make_shared<StaticTokenCredential>(std::move(token));
}

}  // namespace maf_sandbox::azure
