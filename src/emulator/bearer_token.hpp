// Internal: the emulator's one check of a request's bearer token.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace maf_sandbox::emulator {

// True when `authorization` (the header's value, if any) is "Bearer <token>" with a non-empty
// token and, when the emulator was given one (`expected`), that token. The comparison is over
// SHA-256 digests with CRYPTO_memcmp: how long it takes says nothing about how much of a wrong
// token matched, nor about the expected token's length.
bool bearer_authorized(const std::optional<std::string>& authorization,
                       const std::optional<std::string>& expected);

}  // namespace maf_sandbox::emulator
