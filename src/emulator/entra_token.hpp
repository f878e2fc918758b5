// Internal: the impersonating service's check of an Entra ID access token (a JWT).
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include "maf_sandbox/emulator/emulator.hpp"

namespace maf_sandbox::emulator {

// Checks bearer tokens against one issuer key, tenant and audience. The reasons it gives name
// the claim that failed and the value it wanted, never the token: a refusal is quoted back to the
// client and logged.
class EntraTokenCheck {
  public:
    // Throws InvalidArgument when `rules.issuer_key_pem` holds no RSA public key or certificate.
    explicit EntraTokenCheck(const ServiceImpersonation& rules);
    ~EntraTokenCheck();
    EntraTokenCheck(const EntraTokenCheck&) = delete;
    EntraTokenCheck& operator=(const EntraTokenCheck&) = delete;

    // Nothing when `authorization` is "Bearer <JWT>" whose RS256 signature verifies against the
    // issuer key, whose aud is the audience, whose tid and iss name the tenant, and which is
    // valid at `now` (exp, nbf, with a minute of clock skew); otherwise why not.
    std::optional<std::string> refusal(const std::optional<std::string>& authorization,
                                       std::chrono::system_clock::time_point now) const;

  private:
    struct Key;
    std::unique_ptr<Key> key_;
    std::string tenant_;
    std::string audience_;
};

}  // namespace maf_sandbox::emulator
