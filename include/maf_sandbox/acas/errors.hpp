// Errors of the ACAS backend. Each subclasses the core family a caller already catches, so a host
// that only knows the protocol still handles them; provider detail (status bodies, endpoints)
// goes to the log, never into these messages.
#pragma once

#include <string>

#include "maf_sandbox/core/errors.hpp"

namespace maf_sandbox::acas {

// Warm reuse asked for an egress policy other than the one the held sandbox was created with.
// The original stays; dispose the kind (and require success) before changing policy.
class AcasEgressPolicyConflict : public EgressPolicyConflict {
  public:
    using EgressPolicyConflict::EgressPolicyConflict;
    std::string_view type_name() const noexcept override { return "AcasEgressPolicyConflict"; }
};

// A stat or list payload lacked the raw isDir/isSymlink flags (or had them in another type): the
// entry cannot be classified and is never assumed regular. Neither a confinement nor a file
// error: it is a wire-shape failure.
class AcasEntryPayloadIncomplete : public Error {
  public:
    using Error::Error;
    std::string_view type_name() const noexcept override { return "AcasEntryPayloadIncomplete"; }
};

// close() could not release every client within client_close_seconds.
class AcasClientCloseError : public CloseError {
  public:
    using CloseError::CloseError;
    std::string_view type_name() const noexcept override { return "AcasClientCloseError"; }
};

// The backend was closed: it refuses every new operation. Create a new backend to resume.
class AcasBackendClosed : public Error {
  public:
    using Error::Error;
    std::string_view type_name() const noexcept override { return "AcasBackendClosed"; }
};

// The credential resolver failed or returned an unusable binding. There is no fallback to the
// default identity.
class AcasCredentialError : public Error {
  public:
    using Error::Error;
    std::string_view type_name() const noexcept override { return "AcasCredentialError"; }
};

// The service answered with an error status (after the retries the request allows).
class AcasServiceError : public Error {
  public:
    AcasServiceError(const std::string& message, int status, std::string code = {})
        : Error(message), status_(status), code_(std::move(code)) {}
    std::string_view type_name() const noexcept override { return "AcasServiceError"; }
    int status() const noexcept { return status_; }
    // The problem+json title ("SandboxNotFound"), empty when the body had none.
    const std::string& code() const noexcept { return code_; }

  private:
    int status_;
    std::string code_;
};

// 401, or a 403 that outlasted the RBAC propagation window.
class AcasAuthorizationError : public AcasServiceError {
  public:
    using AcasServiceError::AcasServiceError;
    std::string_view type_name() const noexcept override { return "AcasAuthorizationError"; }
};

// The service could not be reached (connect, TLS, reset) on every allowed attempt.
class AcasServiceUnreachable : public Error {
  public:
    using Error::Error;
    std::string_view type_name() const noexcept override { return "AcasServiceUnreachable"; }
};

// The deadline expired while waiting out a 429 Retry-After: nothing was in flight, the sandbox
// is whole. A queued timeout, so protocol code (the shell file transfer) knows the request never
// ran without knowing ACAS.
class AcasThrottled : public SandboxQueuedTimeout {
  public:
    using SandboxQueuedTimeout::SandboxQueuedTimeout;
    std::string_view type_name() const noexcept override { return "AcasThrottled"; }
};

// A non-idempotent request (an exec) failed after it was sent, or got a retryable status other
// than a 429 with Retry-After: whether it ran is unknown, so it is never re-sent and the sandbox
// must be invalidated.
class AcasRequestOutcomeUnknown : public Error {
  public:
    using Error::Error;
    std::string_view type_name() const noexcept override { return "AcasRequestOutcomeUnknown"; }
};

// The program ran, but the guest's answer to the bounded capture was malformed, its scratch
// directory was replaced, or its output could not be read back: the result is lost and the
// sandbox is disposed. Not retried for the caller, since the program may have had its effects.
class AcasExecCaptureFailed : public Error {
  public:
    using Error::Error;
    std::string_view type_name() const noexcept override { return "AcasExecCaptureFailed"; }
};

// An answer carried the acas-emulator's identifying header while emulator mode is off (or was
// missing it while on): refusing to declare a rung the machine does not have.
class AcasEmulatorMismatch : public InvalidArgument {
  public:
    using InvalidArgument::InvalidArgument;
    std::string_view type_name() const noexcept override { return "AcasEmulatorMismatch"; }
};

}  // namespace maf_sandbox::acas
