#include "token_service.hpp"

#include <fmt/format.h>
#include <boost/json/parse.hpp>
#include <boost/json/value.hpp>

#include "maf_sandbox/net/http.hpp"

namespace maf_sandbox::azure::detail {
namespace {

constexpr auto kDefaultRefreshMargin = std::chrono::minutes(5);

WallClock::time_point refresh_point(WallClock::time_point now, std::chrono::seconds lifetime) {
    // Short-lived tokens refresh at half-life so a cache never hands out one about to expire.
    if (lifetime <= 2 * kDefaultRefreshMargin) {
        return now + lifetime / 2;
    }
    return now + lifetime - kDefaultRefreshMargin;
}

std::optional<std::int64_t> integer_field(const boost::json::object& object, std::string_view key) {
    const auto* value = object.if_contains(key);
    if (value == nullptr) {
        return std::nullopt;
    }
    if (value->is_int64()) {
        return value->as_int64();
    }
    if (value->is_uint64()) {
        return static_cast<std::int64_t>(value->as_uint64());
    }
    if (value->is_string()) {
        try {
            std::size_t used = 0;
            const std::string text(value->as_string());
            const auto parsed = std::stoll(text, &used);
            if (used == text.size()) {
                return parsed;
            }
        } catch (const std::exception&) {
        }
    }
    return std::nullopt;
}

boost::json::object parse_object(std::string_view body, std::string_view source) {
    boost::system::error_code error;
    auto value = boost::json::parse(body, error);
    if (error || !value.is_object()) {
        throw AuthenticationFailed(fmt::format(
            "{} got a token answer that is not a JSON object; check the token endpoint", source));
    }
    return std::move(value.as_object());
}

std::string access_token_of(const boost::json::object& object, std::string_view source) {
    const auto* token = object.if_contains("access_token");
    if (token == nullptr || !token->is_string() || token->as_string().empty()) {
        throw AuthenticationFailed(fmt::format(
            "{} got a token answer without access_token; check the token endpoint", source));
    }
    return std::string(token->as_string());
}

}  // namespace

void require_secure_endpoint(std::string_view url, std::string_view what) {
    const auto parsed = net::parse_http_url(url);
    if (!parsed.is_https() && !net::is_loopback_host(parsed.host)) {
        throw InvalidArgument(fmt::format(
            "{} must be an https URL (plain http is accepted only on loopback); got scheme {}",
            what, parsed.scheme));
    }
}

std::string authority_host(const CredentialOptions& options) {
    std::string host = options.authority_host.value_or(
        options.environment("AZURE_AUTHORITY_HOST").value_or(std::string(kDefaultAuthorityHost)));
    while (!host.empty() && host.back() == '/') {
        host.pop_back();
    }
    require_secure_endpoint(host, "the authority host (AZURE_AUTHORITY_HOST)");
    return host;
}

std::string resource_of(const std::vector<std::string>& scopes) {
    if (scopes.size() != 1) {
        throw InvalidArgument("managed identity and the Azure CLI take exactly one scope");
    }
    std::string resource = scopes.front();
    constexpr std::string_view kSuffix = "/.default";
    if (resource.size() > kSuffix.size() &&
        resource.compare(resource.size() - kSuffix.size(), kSuffix.size(), kSuffix) == 0) {
        resource.resize(resource.size() - kSuffix.size());
    }
    return resource;
}

std::string form_encode(const std::map<std::string, std::string>& fields) {
    std::string body;
    for (const auto& [name, value] : fields) {
        if (!body.empty()) {
            body.push_back('&');
        }
        body += net::percent_encode(name) + "=" + net::percent_encode(value);
    }
    return body;
}

void require_plain_id(std::string_view value, std::string_view what) {
    if (value.empty()) {
        throw CredentialUnavailable(fmt::format("{} is not set", what));
    }
    for (char c : value) {
        const bool plain = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
                           (c >= '0' && c <= '9') || c == '-' || c == '.' || c == '_';
        if (!plain) {
            throw InvalidArgument(fmt::format(
                "{} may hold only letters, digits, '-', '.' and '_'; fix the value", what));
        }
    }
}

std::unique_ptr<net::HttpClient> make_token_client(boost::asio::any_io_executor executor,
                                                   const CredentialOptions& options) {
    net::HttpClientOptions client_options;
    client_options.ca_file = options.ca_file;
    client_options.default_timeout = options.request_timeout;
    client_options.default_max_response_bytes = 1 * kMiB;
    client_options.user_agent = "maf-sandbox-azure/0.1";
    return std::make_unique<net::HttpClient>(std::move(executor), std::move(client_options));
}

AccessToken parse_entra_answer(std::string_view body, std::string_view source) {
    const auto object = parse_object(body, source);
    AccessToken token;
    token.token = access_token_of(object, source);
    const auto now = WallClock::now();
    const auto expires_in = integer_field(object, "expires_in").value_or(3600);
    token.expires_on = now + std::chrono::seconds(expires_in);
    if (const auto refresh_in = integer_field(object, "refresh_in")) {
        token.refresh_on = now + std::chrono::seconds(*refresh_in);
    } else {
        token.refresh_on = refresh_point(now, std::chrono::seconds(expires_in));
    }
    return token;
}

AccessToken parse_managed_identity_answer(std::string_view body, std::string_view source) {
    const auto object = parse_object(body, source);
    AccessToken token;
    token.token = access_token_of(object, source);
    const auto now = WallClock::now();
    if (const auto expires_on = integer_field(object, "expires_on")) {
        token.expires_on = WallClock::time_point(std::chrono::seconds(*expires_on));
    } else {
        token.expires_on =
            now + std::chrono::seconds(integer_field(object, "expires_in").value_or(3600));
    }
    const auto lifetime = std::chrono::duration_cast<std::chrono::seconds>(token.expires_on - now);
    token.refresh_on = refresh_point(now, std::max(lifetime, std::chrono::seconds(0)));
    return token;
}

Task<AccessToken> request_entra_token(net::HttpClient& client, const CredentialOptions& options,
                                      std::string_view tenant_id,
                                      std::map<std::string, std::string> fields,
                                      std::string_view source) {
    require_plain_id(tenant_id, "AZURE_TENANT_ID");
    net::HttpRequest request;
    request.method = "POST";
    request.target = fmt::format("{}/{}/oauth2/v2.0/token", authority_host(options), tenant_id);
    request.headers.set("Content-Type", "application/x-www-form-urlencoded");
    request.headers.set("Accept", "application/json");
    request.body = form_encode(fields);
    net::HttpResponse response;
    try {
        response = co_await client.send(std::move(request),
                                        net::RequestOptions{options.request_timeout, 1 * kMiB});
    } catch (const net::NetError& e) {
        throw AuthenticationFailed(
            fmt::format("{} could not reach the authority ({}); check the network and "
                        "AZURE_AUTHORITY_HOST",
                        source, e.what()));
    }
    if (response.status != 200) {
        // The error code is safe to show; the description can name tenants, so it stays out.
        std::string code = "unknown";
        boost::system::error_code error;
        auto value = boost::json::parse(response.body, error);
        if (!error && value.is_object()) {
            if (const auto* e = value.as_object().if_contains("error"); e && e->is_string()) {
                code = std::string(e->as_string());
            }
        }
        throw AuthenticationFailed(fmt::format(
            "{} was refused by the authority (HTTP {}, error {}); check the client id, tenant and "
            "secret or certificate",
            source, response.status, code));
    }
    co_return parse_entra_answer(response.body, source);
}

}  // namespace maf_sandbox::azure::detail
