#include "client_assertion.hpp"

#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include <fmt/format.h>
#include <boost/json/serialize.hpp>
#include <boost/json/value.hpp>
#include <chrono>
#include <fstream>
#include <sstream>

#include "maf_sandbox/core/errors.hpp"
#include "maf_sandbox/core/random_id.hpp"

namespace maf_sandbox::azure::detail {

struct CertificateSigner::Key {
    std::unique_ptr<EVP_PKEY, decltype(&EVP_PKEY_free)> pkey{nullptr, &EVP_PKEY_free};
};

std::string base64url(std::string_view bytes) {
    static constexpr char kAlphabet[] =
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    std::string out;
    std::size_t i = 0;
    const auto byte = [&](std::size_t k) { return static_cast<unsigned char>(bytes[k]); };
    for (; i + 2 < bytes.size(); i += 3) {
        const unsigned v = (byte(i) << 16) | (byte(i + 1) << 8) | byte(i + 2);
        out += kAlphabet[(v >> 18) & 63];
        out += kAlphabet[(v >> 12) & 63];
        out += kAlphabet[(v >> 6) & 63];
        out += kAlphabet[v & 63];
    }
    if (i + 1 == bytes.size()) {
        const unsigned v = byte(i) << 16;
        out += kAlphabet[(v >> 18) & 63];
        out += kAlphabet[(v >> 12) & 63];
    } else if (i + 2 == bytes.size()) {
        const unsigned v = (byte(i) << 16) | (byte(i + 1) << 8);
        out += kAlphabet[(v >> 18) & 63];
        out += kAlphabet[(v >> 12) & 63];
        out += kAlphabet[(v >> 6) & 63];
    }
    return out;
}

CertificateSigner CertificateSigner::from_pem_file(const std::string& path) {
    std::ifstream stream(path, std::ios::binary);
    std::ostringstream contents;
    contents << stream.rdbuf();
    if (!stream) {
        throw InvalidArgument(fmt::format(
            "cannot read the client certificate file {}; check AZURE_CLIENT_CERTIFICATE_PATH",
            path));
    }
    return from_pem(contents.str(), path);
}

CertificateSigner CertificateSigner::from_pem(std::string_view pem, std::string_view origin) {
    const auto bio = [&] {
        return std::unique_ptr<BIO, decltype(&BIO_free)>(
            BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())), &BIO_free);
    };
    auto key_bio = bio();
    auto key = std::make_shared<Key>();
    key->pkey.reset(PEM_read_bio_PrivateKey(key_bio.get(), nullptr, nullptr, nullptr));
    auto cert_bio = bio();
    std::unique_ptr<X509, decltype(&X509_free)> certificate(
        PEM_read_bio_X509(cert_bio.get(), nullptr, nullptr, nullptr), &X509_free);
    if (!key->pkey || !certificate) {
        throw InvalidArgument(
            fmt::format("{} must hold both a PEM private key and its PEM certificate", origin));
    }
    if (EVP_PKEY_base_id(key->pkey.get()) != EVP_PKEY_RSA) {
        throw InvalidArgument(fmt::format(
            "{} holds a non-RSA key; Entra client assertions here are RS256, use an RSA key",
            origin));
    }
    unsigned char digest[EVP_MAX_MD_SIZE];
    unsigned int length = 0;
    if (X509_digest(certificate.get(), EVP_sha1(), digest, &length) != 1) {
        throw Error("computing the certificate thumbprint failed in OpenSSL");
    }
    CertificateSigner signer;
    signer.key_ = std::move(key);
    signer.thumbprint_ = base64url(std::string_view(reinterpret_cast<char*>(digest), length));
    return signer;
}

std::string CertificateSigner::assertion(std::string_view client_id,
                                         std::string_view audience) const {
    unsigned char random[16];
    fill_random(random);
    const auto now = std::chrono::duration_cast<std::chrono::seconds>(
                         std::chrono::system_clock::now().time_since_epoch())
                         .count();
    boost::json::object header{{"alg", "RS256"}, {"typ", "JWT"}, {"x5t", thumbprint_}};
    boost::json::object claims{
        {"aud", audience},
        {"iss", client_id},
        {"sub", client_id},
        {"jti", base64url(std::string_view(reinterpret_cast<char*>(random), sizeof random))},
        {"nbf", now},
        {"iat", now},
        {"exp", now + 600}};
    const std::string signing_input =
        base64url(boost::json::serialize(header)) + "." + base64url(boost::json::serialize(claims));
    std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> context(EVP_MD_CTX_new(),
                                                                    &EVP_MD_CTX_free);
    std::size_t size = 0;
    if (!context ||
        EVP_DigestSignInit(context.get(), nullptr, EVP_sha256(), nullptr, key_->pkey.get()) != 1 ||
        EVP_DigestSign(context.get(), nullptr, &size,
                       reinterpret_cast<const unsigned char*>(signing_input.data()),
                       signing_input.size()) != 1) {
        throw Error("signing the client assertion failed in OpenSSL; check the private key");
    }
    std::string signature(size, '\0');
    if (EVP_DigestSign(context.get(), reinterpret_cast<unsigned char*>(signature.data()), &size,
                       reinterpret_cast<const unsigned char*>(signing_input.data()),
                       signing_input.size()) != 1) {
        throw Error("signing the client assertion failed in OpenSSL; check the private key");
    }
    signature.resize(size);
    return signing_input + "." + base64url(signature);
}

}  // namespace maf_sandbox::azure::detail
