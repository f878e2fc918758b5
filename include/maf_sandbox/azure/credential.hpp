// Azure access tokens for the ACAS data plane: the TokenCredential interface every source
// implements, the two failure families a chain needs, and the environment reader that lets tests
// hand a credential a private set of variables instead of the process environment.
//
// A token lives only in the host process: no message, log line or error ever carries one.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "maf_sandbox/core/errors.hpp"
#include "maf_sandbox/core/sandbox.hpp"

namespace maf_sandbox::azure {

// The audience of the ACAS data plane.
inline constexpr std::string_view kDataPlaneScope = "https://dynamicsessions.io/.default";

using WallClock = std::chrono::system_clock;

struct AccessToken {
    std::string token;
    WallClock::time_point expires_on;
    // When a cache should fetch a new token (the service's refresh_in, or five minutes before
    // expiry); unset lets the cache decide.
    std::optional<WallClock::time_point> refresh_on;
};

// This source is not configured in this environment (no variables, no `az`, no IMDS answer): a
// chain moves on to the next source.
class CredentialUnavailable : public Error {
  public:
    using Error::Error;
    std::string_view type_name() const noexcept override { return "CredentialUnavailable"; }
};

// The source is configured and the token service refused or failed: a chain stops here, because
// falling through to another identity would act as someone the host did not choose.
class AuthenticationFailed : public Error {
  public:
    using Error::Error;
    std::string_view type_name() const noexcept override { return "AuthenticationFailed"; }
};

class TokenCredential {
  public:
    virtual ~TokenCredential() = default;
    // A short name for logs ("EnvironmentCredential").
    virtual std::string_view name() const = 0;
    // A token for `scopes`. Throws CredentialUnavailable or AuthenticationFailed; never returns
    // an empty token.
    virtual Task<AccessToken> get_token(std::vector<std::string> scopes) = 0;
};

// Reads one environment variable; nullopt when unset or empty.
using EnvironmentReader = std::function<std::optional<std::string>(std::string_view name)>;

// The process environment (read at each call).
EnvironmentReader process_environment();
// A fixed map, for tests and for hosts that pass configuration explicitly.
EnvironmentReader environment_from(std::map<std::string, std::string> variables);

}  // namespace maf_sandbox::azure
