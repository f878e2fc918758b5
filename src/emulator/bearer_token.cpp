#include "bearer_token.hpp"

#include <openssl/crypto.h>
#include <openssl/sha.h>

#include <array>

namespace maf_sandbox::emulator {
namespace {

std::array<unsigned char, SHA256_DIGEST_LENGTH> digest(std::string_view text) {
    std::array<unsigned char, SHA256_DIGEST_LENGTH> out{};
    ::SHA256(reinterpret_cast<const unsigned char*>(text.data()), text.size(), out.data());
    return out;
}

}  // namespace

bool bearer_authorized(const std::optional<std::string>& authorization,
                       const std::optional<std::string>& expected) {
    constexpr std::string_view kScheme = "Bearer ";
    if (!authorization || !authorization->starts_with(kScheme) ||
        authorization->size() <= kScheme.size()) {
        return false;
    }
    if (!expected) {
        return true;  // no --token: any bearer token is accepted (docs/emulator.md)
    }
    const auto presented = digest(std::string_view(*authorization).substr(kScheme.size()));
    const auto wanted = digest(*expected);
    return CRYPTO_memcmp(presented.data(), wanted.data(), presented.size()) == 0;
}

}  // namespace maf_sandbox::emulator
