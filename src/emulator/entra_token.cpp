#include "entra_token.hpp"

#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include <fmt/format.h>
#include <boost/json/parse.hpp>
#include <boost/json/value.hpp>

#include "maf_sandbox/core/errors.hpp"

namespace maf_sandbox::emulator {
namespace json = boost::json;

namespace {

// Entra ID and a verifier may disagree on the time by this much.
constexpr std::int64_t kClockSkewSeconds = 60;

std::optional<std::string> base64url_decode(std::string_view text) {
    std::string out;
    unsigned value = 0;
    int bits = 0;
    for (const char c : text) {
        int digit = -1;
        if (c >= 'A' && c <= 'Z')
            digit = c - 'A';
        else if (c >= 'a' && c <= 'z')
            digit = c - 'a' + 26;
        else if (c >= '0' && c <= '9')
            digit = c - '0' + 52;
        else if (c == '-')
            digit = 62;
        else if (c == '_')
            digit = 63;
        else
            return std::nullopt;  // JWTs are unpadded base64url: anything else is malformed
        value = (value << 6) | static_cast<unsigned>(digit);
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            out.push_back(static_cast<char>((value >> bits) & 0xff));
        }
    }
    return out;
}

std::optional<json::object> json_part(std::string_view encoded) {
    const auto decoded = base64url_decode(encoded);
    if (!decoded)
        return std::nullopt;
    boost::system::error_code error;
    auto value = json::parse(*decoded, error);
    if (error || !value.is_object())
        return std::nullopt;
    return std::move(value.as_object());
}

std::optional<std::string> string_claim(const json::object& claims, std::string_view name) {
    const auto* value = claims.if_contains(name);
    if (value == nullptr || !value->is_string())
        return std::nullopt;
    return std::string(value->as_string());
}

std::optional<std::int64_t> time_claim(const json::object& claims, std::string_view name) {
    const auto* value = claims.if_contains(name);
    if (value == nullptr)
        return std::nullopt;
    if (value->is_int64())
        return value->as_int64();
    if (value->is_uint64())
        return static_cast<std::int64_t>(value->as_uint64());
    return std::nullopt;
}

}  // namespace

struct EntraTokenCheck::Key {
    std::unique_ptr<EVP_PKEY, decltype(&EVP_PKEY_free)> pkey{nullptr, &EVP_PKEY_free};
};

EntraTokenCheck::EntraTokenCheck(const ServiceImpersonation& rules)
    : key_(std::make_unique<Key>()), tenant_(rules.tenant), audience_(rules.audience) {
    const auto bio = [&] {
        return std::unique_ptr<BIO, decltype(&BIO_free)>(
            BIO_new_mem_buf(rules.issuer_key_pem.data(),
                            static_cast<int>(rules.issuer_key_pem.size())),
            &BIO_free);
    };
    auto key_bio = bio();
    key_->pkey.reset(PEM_read_bio_PUBKEY(key_bio.get(), nullptr, nullptr, nullptr));
    if (!key_->pkey) {
        auto cert_bio = bio();
        std::unique_ptr<X509, decltype(&X509_free)> certificate(
            PEM_read_bio_X509(cert_bio.get(), nullptr, nullptr, nullptr), &X509_free);
        if (certificate)
            key_->pkey.reset(X509_get_pubkey(certificate.get()));
    }
    if (!key_->pkey || EVP_PKEY_base_id(key_->pkey.get()) != EVP_PKEY_RSA) {
        throw InvalidArgument(
            "--issuer-key must hold the token issuer's RSA public key or certificate (PEM)");
    }
    if (tenant_.empty()) {
        throw InvalidArgument("--tenant must name the tenant tokens are issued in");
    }
}

EntraTokenCheck::~EntraTokenCheck() = default;

std::optional<std::string> EntraTokenCheck::refusal(
    const std::optional<std::string>& authorization,
    std::chrono::system_clock::time_point now) const {
    constexpr std::string_view kScheme = "Bearer ";
    if (!authorization || !authorization->starts_with(kScheme)) {
        return "no bearer token was sent";
    }
    const std::string_view token = std::string_view(*authorization).substr(kScheme.size());
    const auto first = token.find('.');
    const auto second = first == std::string_view::npos ? first : token.find('.', first + 1);
    if (second == std::string_view::npos || token.find('.', second + 1) != std::string_view::npos) {
        return "the bearer token is not a JWT (three dot-separated parts)";
    }
    const auto header = json_part(token.substr(0, first));
    const auto claims = json_part(token.substr(first + 1, second - first - 1));
    const auto signature = base64url_decode(token.substr(second + 1));
    if (!header || !claims || !signature) {
        return "the bearer token is not a well-formed JWT";
    }
    if (string_claim(*header, "alg") != "RS256") {
        return "the token is not signed with RS256";
    }
    const std::string_view signed_part = token.substr(0, second);
    std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> context(EVP_MD_CTX_new(),
                                                                    &EVP_MD_CTX_free);
    if (!context ||
        EVP_DigestVerifyInit(context.get(), nullptr, EVP_sha256(), nullptr, key_->pkey.get()) !=
            1 ||
        EVP_DigestVerify(context.get(), reinterpret_cast<const unsigned char*>(signature->data()),
                         signature->size(),
                         reinterpret_cast<const unsigned char*>(signed_part.data()),
                         signed_part.size()) != 1) {
        return "the token's signature does not verify against the issuer's key";
    }
    if (string_claim(*claims, "aud") != audience_) {
        return fmt::format("the token was not issued for this service (audience must be {})",
                           audience_);
    }
    const auto tid = string_claim(*claims, "tid");
    const auto iss = string_claim(*claims, "iss");
    const bool issuer_matches =
        iss == fmt::format("https://sts.windows.net/{}/", tenant_) ||
        iss == fmt::format("https://login.microsoftonline.com/{}/v2.0", tenant_);
    if (tid != tenant_ || !issuer_matches) {
        return "the token was issued in another tenant than this sandbox group's";
    }
    const auto seconds =
        std::chrono::duration_cast<std::chrono::seconds>(now.time_since_epoch()).count();
    const auto exp = time_claim(*claims, "exp");
    if (!exp || *exp + kClockSkewSeconds <= seconds) {
        return "the token has expired";
    }
    if (const auto nbf = time_claim(*claims, "nbf"); nbf && *nbf - kClockSkewSeconds > seconds) {
        return "the token is not valid yet";
    }
    return std::nullopt;
}

}  // namespace maf_sandbox::emulator
