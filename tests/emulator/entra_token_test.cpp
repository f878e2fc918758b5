// The impersonating service's token check (EntraTokenCheck) on tokens signed here: every claim
// it names is enforced on its own, and no refusal quotes the token.
#include <gtest/gtest.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rsa.h>

#include <boost/json/serialize.hpp>
#include <boost/json/value.hpp>
#include <chrono>
#include <memory>

#include "entra_token.hpp"
#include "maf_sandbox/core/errors.hpp"

namespace maf_sandbox::emulator {
namespace {

namespace json = boost::json;
using Clock = std::chrono::system_clock;
constexpr const char* kTenant = "72f988bf-0000-4000-8000-0000000000aa";

std::string base64url(std::string_view bytes) {
    static constexpr char kAlphabet[] =
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    std::string out;
    unsigned value = 0;
    int bits = 0;
    for (const unsigned char c : bytes) {
        value = (value << 8) | c;
        bits += 8;
        while (bits >= 6) {
            bits -= 6;
            out.push_back(kAlphabet[(value >> bits) & 63]);
        }
    }
    if (bits > 0)
        out.push_back(kAlphabet[(value << (6 - bits)) & 63]);
    return out;
}

std::string fmt_iss(std::string_view tenant) {
    return "https://sts.windows.net/" + std::string(tenant) + "/";
}

using Key = std::unique_ptr<EVP_PKEY, decltype(&EVP_PKEY_free)>;

Key new_key() {
    return Key(EVP_RSA_gen(2048), &EVP_PKEY_free);
}

std::string public_pem(EVP_PKEY* key) {
    std::unique_ptr<BIO, decltype(&BIO_free)> bio(BIO_new(BIO_s_mem()), &BIO_free);
    PEM_write_bio_PUBKEY(bio.get(), key);
    char* data = nullptr;
    const long size = BIO_get_mem_data(bio.get(), &data);
    return std::string(data, static_cast<std::size_t>(size));
}

std::int64_t now_seconds() {
    return std::chrono::duration_cast<std::chrono::seconds>(Clock::now().time_since_epoch())
        .count();
}

json::object good_claims() {
    const auto now = now_seconds();
    return {{"aud", "https://dynamicsessions.io"},
            {"iss", fmt_iss(kTenant)},
            {"tid", kTenant},
            {"nbf", now},
            {"iat", now},
            {"exp", now + 3600}};
}

std::string sign(EVP_PKEY* key, const json::object& claims, std::string alg = "RS256") {
    const std::string input =
        base64url(json::serialize(json::object{{"alg", alg}, {"typ", "JWT"}})) + "." +
        base64url(json::serialize(claims));
    std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> context(EVP_MD_CTX_new(),
                                                                    &EVP_MD_CTX_free);
    std::size_t size = 0;
    EVP_DigestSignInit(context.get(), nullptr, EVP_sha256(), nullptr, key);
    EVP_DigestSign(context.get(), nullptr, &size,
                   reinterpret_cast<const unsigned char*>(input.data()), input.size());
    std::string signature(size, '\0');
    EVP_DigestSign(context.get(), reinterpret_cast<unsigned char*>(signature.data()), &size,
                   reinterpret_cast<const unsigned char*>(input.data()), input.size());
    signature.resize(size);
    return "Bearer " + input + "." + base64url(signature);
}

class EntraToken : public ::testing::Test {
  protected:
    EntraToken() : key_(new_key()), check_(rules(key_.get())) {}

    static ServiceImpersonation rules(EVP_PKEY* key) {
        ServiceImpersonation r;
        r.issuer_key_pem = public_pem(key);
        r.tenant = kTenant;
        return r;
    }

    std::optional<std::string> refusal_of(const std::string& authorization) {
        auto why = check_.refusal(authorization, Clock::now());
        if (why) {
            EXPECT_EQ(why->find(authorization.substr(7, 40)), std::string::npos) << *why;
        }
        return why;
    }

    Key key_;
    EntraTokenCheck check_;
};

TEST_F(EntraToken, ATokenFromTheIssuerForTheAudienceInTheTenantIsLetIn) {
    EXPECT_EQ(refusal_of(sign(key_.get(), good_claims())), std::nullopt);
    auto v2 = good_claims();
    v2["iss"] = std::string("https://login.microsoftonline.com/") + kTenant + "/v2.0";
    EXPECT_EQ(refusal_of(sign(key_.get(), v2)), std::nullopt);
}

TEST_F(EntraToken, AnotherKeysSignatureIsRefused) {
    const auto other = new_key();
    const auto why = refusal_of(sign(other.get(), good_claims()));
    ASSERT_TRUE(why);
    EXPECT_NE(why->find("signature"), std::string::npos);
}

TEST_F(EntraToken, AnAlgorithmOtherThanRs256IsRefused) {
    const auto why = refusal_of(sign(key_.get(), good_claims(), "none"));
    ASSERT_TRUE(why);
    EXPECT_NE(why->find("RS256"), std::string::npos);
}

TEST_F(EntraToken, AnotherAudienceIsRefusedNamingTheOneWanted) {
    auto claims = good_claims();
    claims["aud"] = "https://management.azure.com";
    const auto why = refusal_of(sign(key_.get(), claims));
    ASSERT_TRUE(why);
    EXPECT_NE(why->find("audience must be https://dynamicsessions.io"), std::string::npos);
}

TEST_F(EntraToken, AnotherTenantInTidOrIssIsRefused) {
    auto tid = good_claims();
    tid["tid"] = "someone-else";
    auto iss = good_claims();
    iss["iss"] = fmt_iss("someone-else");
    for (const auto& claims : {tid, iss}) {
        const auto why = refusal_of(sign(key_.get(), claims));
        ASSERT_TRUE(why);
        EXPECT_NE(why->find("another tenant"), std::string::npos);
    }
}

TEST_F(EntraToken, AnExpiredOrNotYetValidTokenIsRefused) {
    auto expired = good_claims();
    expired["exp"] = now_seconds() - 120;
    auto early = good_claims();
    early["nbf"] = now_seconds() + 600;
    auto none = good_claims();
    none.erase("exp");
    EXPECT_EQ(refusal_of(sign(key_.get(), expired)), "the token has expired");
    EXPECT_EQ(refusal_of(sign(key_.get(), none)), "the token has expired");
    EXPECT_EQ(refusal_of(sign(key_.get(), early)), "the token is not valid yet");
}

TEST_F(EntraToken, NoBearerOrAMalformedTokenIsRefused) {
    EXPECT_TRUE(check_.refusal(std::nullopt, Clock::now()));
    EXPECT_TRUE(check_.refusal(std::string("Basic abc"), Clock::now()));
    EXPECT_TRUE(check_.refusal(std::string("Bearer a.b"), Clock::now()));
    EXPECT_TRUE(check_.refusal(std::string("Bearer a.b.c.d"), Clock::now()));
    EXPECT_TRUE(check_.refusal(std::string("Bearer !!.??.**"), Clock::now()));
}

TEST(EntraTokenRules, AKeyThatIsNotRsaIsRefusedAtStart) {
    ServiceImpersonation rules;
    rules.issuer_key_pem = "not a key";
    rules.tenant = kTenant;
    EXPECT_THROW(EntraTokenCheck{rules}, InvalidArgument);
}

}  // namespace
}  // namespace maf_sandbox::emulator
