// The Azure CLI as a token source: `az account get-access-token`, run with a deadline.
#include <fmt/format.h>
#include <spdlog/logger.h>
#include <boost/json/parse.hpp>
#include <boost/json/value.hpp>
#include <ctime>

#include "child_process.hpp"
#include "token_service.hpp"

namespace maf_sandbox::azure {
namespace {

std::optional<WallClock::time_point> parse_local_time(const std::string& text) {
    std::tm tm{};
    if (::strptime(text.c_str(), "%Y-%m-%d %H:%M:%S", &tm) == nullptr) {
        return std::nullopt;
    }
    tm.tm_isdst = -1;
    const std::time_t t = std::mktime(&tm);
    if (t == -1)
        return std::nullopt;
    return WallClock::from_time_t(t);
}

class AzureCliCredential : public TokenCredential {
  public:
    AzureCliCredential(boost::asio::any_io_executor executor, CredentialOptions options)
        : executor_(std::move(executor)), options_(std::move(options)) {}

    std::string_view name() const override { return "AzureCliCredential"; }

    Task<AccessToken> get_token(std::vector<std::string> scopes) override {
        const auto resource = detail::resource_of(scopes);
        const auto program =
            detail::find_on_path(options_.az_program, options_.environment("PATH").value_or(""));
        if (program.empty()) {
            throw CredentialUnavailable("AzureCliCredential: `az` is not on PATH");
        }
        std::vector<std::string> arguments;
        for (const char* word : {"account", "get-access-token", "--resource"})
            arguments.emplace_back(word);
        arguments.push_back(resource);
        arguments.emplace_back("-o");
        arguments.emplace_back("json");
        const auto output = co_await detail::run_program(executor_, program, std::move(arguments),
                                                         options_.cli_timeout);
        if (output.exit_code != 0) {
            if (options_.log) {
                options_.log->debug("az account get-access-token exited {}", output.exit_code);
            }
            if (output.err.find("az login") != std::string::npos) {
                throw CredentialUnavailable("AzureCliCredential: not logged in; run `az login`");
            }
            throw AuthenticationFailed(fmt::format(
                "az account get-access-token failed with exit {}; run it by hand to see why",
                output.exit_code));
        }
        boost::system::error_code error;
        auto value = boost::json::parse(output.out, error);
        if (error || !value.is_object()) {
            throw AuthenticationFailed("az account get-access-token printed no JSON object");
        }
        const auto& object = value.as_object();
        const auto* token = object.if_contains("accessToken");
        if (token == nullptr || !token->is_string() || token->as_string().empty()) {
            throw AuthenticationFailed("az account get-access-token printed no accessToken");
        }
        AccessToken result;
        result.token = std::string(token->as_string());
        result.expires_on = WallClock::now() + std::chrono::minutes(5);
        if (const auto* epoch = object.if_contains("expires_on"); epoch && epoch->is_int64()) {
            result.expires_on = WallClock::time_point(std::chrono::seconds(epoch->as_int64()));
        } else if (const auto* local = object.if_contains("expiresOn");
                   local && local->is_string()) {
            if (const auto parsed = parse_local_time(std::string(local->as_string()))) {
                result.expires_on = *parsed;
            }
        }
        co_return result;
    }

  private:
    boost::asio::any_io_executor executor_;
    CredentialOptions options_;
};

}  // namespace

std::shared_ptr<TokenCredential> make_azure_cli_credential(boost::asio::any_io_executor executor,
                                                           CredentialOptions options) {
    return std::make_shared<AzureCliCredential>(std::move(executor), std::move(options));
}

}  // namespace maf_sandbox::azure
