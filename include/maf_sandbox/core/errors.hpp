// One typed hierarchy mirroring the protocol's exceptions. The Python protocol leans on builtin
// relations (ValueError for confinement, OSError for file refusals, TimeoutError for exactly "your
// timeout expired"); each of those has a named base class here so callers can catch by family.
//
// Every message says what happened and what to do about it. Messages never carry a token, a secret
// or a provider response body: those go to the log only.
#pragma once

#include <cstddef>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "maf_sandbox/core/vocabulary.hpp"

namespace maf_sandbox {

class Error : public std::runtime_error {
  public:
    explicit Error(const std::string& message) : std::runtime_error(message) {}
    // The class name as the CLI and logs print it ("SandboxEgressNotEnforced").
    virtual std::string_view type_name() const noexcept { return "Error"; }

    // The message with every layer's context: "acquire ...: create sandbox: PUT /sandboxes: ...".
    const char* what() const noexcept override;
    // The message as first thrown, without the context the layers above added.
    const char* cause() const noexcept { return std::runtime_error::what(); }
    // crun's wrap: prefixes what this layer was doing ("create sandbox: <message>"). The error
    // keeps its type and fields, so callers that catch by type still see it, innermost cause and
    // all. Context names an operation and the ids involved, never a token, a secret or a
    // provider's response body. The exception is its thrower's own while it unwinds, so this
    // mutates it in place; nothing here hands one exception_ptr to two callers.
    void add_context(std::string_view doing) noexcept;

  private:
    // Shared, so copying an exception (throw_with_nested, exception_ptr) never throws.
    std::shared_ptr<const std::string> wrapped_;
};

#define MAF_SANDBOX_ERROR(Name, Base)                                          \
    class Name : public Base {                                                 \
      public:                                                                  \
        using Base::Base;                                                      \
        std::string_view type_name() const noexcept override { return #Name; } \
    }

// --- ValueError family: the caller asked for something that cannot be valid. -------------------
MAF_SANDBOX_ERROR(InvalidArgument, Error);
// A guest path that resolves outside its working directory, through a link, or names the working
// directory itself where a file is required.
MAF_SANDBOX_ERROR(ConfinementEscape, InvalidArgument);

// Exec output went over max_output_bytes. Carries the captured head of each stream and the total
// byte count, so a caller can show what arrived and how much was dropped.
class ExecOutputLimitExceeded : public InvalidArgument {
  public:
    ExecOutputLimitExceeded(const std::string& message, std::string stdout_head,
                            std::string stderr_head, std::size_t total_bytes, int exit_code = -1)
        : InvalidArgument(message),
          stdout_head_(std::move(stdout_head)),
          stderr_head_(std::move(stderr_head)),
          total_bytes_(total_bytes),
          exit_code_(exit_code) {}
    std::string_view type_name() const noexcept override {
        return "SandboxExecOutputLimitExceeded";
    }
    const std::string& stdout_head() const noexcept { return stdout_head_; }
    const std::string& stderr_head() const noexcept { return stderr_head_; }
    // Bytes the program wrote on both streams, including those that were dropped.
    std::size_t total_bytes() const noexcept { return total_bytes_; }
    // The program's exit code when it finished on its own, -1 when it was killed for the overflow.
    int exit_code() const noexcept { return exit_code_; }

  private:
    std::string stdout_head_;
    std::string stderr_head_;
    std::size_t total_bytes_;
    int exit_code_;
};

// --- Router refusals (PermissionError family): the host's policy forbids this. ------------------
MAF_SANDBOX_ERROR(PolicyRefusal, Error);
MAF_SANDBOX_ERROR(SandboxBackendNotPermitted, PolicyRefusal);
MAF_SANDBOX_ERROR(SandboxCapabilityDenied, PolicyRefusal);
MAF_SANDBOX_ERROR(SandboxIdentityDenied, PolicyRefusal);
MAF_SANDBOX_ERROR(SandboxEgressNotEnforced, PolicyRefusal);
// Warm reuse asked for an egress policy other than the one the live sandbox was created with.
MAF_SANDBOX_ERROR(EgressPolicyConflict, SandboxEgressNotEnforced);
MAF_SANDBOX_ERROR(SandboxTransferLimitsNotPermitted, PolicyRefusal);

// --- The backend cannot do what the spec needs (RuntimeError family). --------------------------
MAF_SANDBOX_ERROR(NoSandboxBackend, Error);
MAF_SANDBOX_ERROR(SandboxCapabilityNotSupported, Error);
MAF_SANDBOX_ERROR(SandboxOsFamilyNotSupported, Error);
MAF_SANDBOX_ERROR(SandboxIsolationScopeNotSupported, Error);

// --- OSError family: a guest file operation was refused. Keeps errno where there is one. -------
// FileError is a virtual base of PermissionDenied and SandboxFileRefused, so one refusal can be
// both (SandboxFilePermissionRefused) and still be caught once as a FileError.
class FileError : public Error {
  public:
    explicit FileError(const std::string& message, int error_number = 0)
        : Error(message), error_number_(error_number) {}
    std::string_view type_name() const noexcept override { return "OSError"; }
    int error_number() const noexcept { return error_number_; }

  private:
    int error_number_;
};
MAF_SANDBOX_ERROR(NotADirectory, FileError);
MAF_SANDBOX_ERROR(FileNotFound, FileError);
MAF_SANDBOX_ERROR(IsADirectory, FileError);
// The protocol's permission-denied type (the seed's PermissionError, an OSError): the guest's
// own permissions refused a file operation.
class PermissionDenied : public virtual FileError {
  public:
    explicit PermissionDenied(const std::string& message, int error_number = 0)
        : FileError(message, error_number) {}
    std::string_view type_name() const noexcept override { return "PermissionDenied"; }
};

// The guest-side refusals of the shell file transfer and of guest-run file operations, typed by
// FileRefusal. Throw them through throw_file_refused, which makes a permission refusal a
// PermissionDenied too.
class SandboxFileRefused : public virtual FileError {
  public:
    SandboxFileRefused(FileRefusal refusal, const std::string& message, int error_number = 0)
        : FileError(message, error_number), refusal_(refusal) {}
    std::string_view type_name() const noexcept override { return "SandboxFileRefused"; }
    FileRefusal refusal() const noexcept { return refusal_; }

  private:
    FileRefusal refusal_;
};

// A file refusal for permission: catchable as SandboxFileRefused (refusal permission_denied) and
// as PermissionDenied, the way the seed's refusal is both a file refusal and a PermissionError.
class SandboxFilePermissionRefused : public SandboxFileRefused, public PermissionDenied {
  public:
    // `error_number` is the errno behind it where there is one (EACCES, EPERM, EROFS).
    explicit SandboxFilePermissionRefused(const std::string& message, int error_number = 13);
    std::string_view type_name() const noexcept override { return "SandboxFileRefused"; }
};

// Throws SandboxFileRefused, or SandboxFilePermissionRefused for FileRefusal::permission_denied.
[[noreturn]] void throw_file_refused(FileRefusal refusal, const std::string& message);
// The transfer failed cleanly: the staged file was taken back and the sandbox is whole.
MAF_SANDBOX_ERROR(SandboxShellTransferFailed, Error);
// The transfer stopped mid-command: the sandbox may hold a staged file and should be discarded.
MAF_SANDBOX_ERROR(SandboxShellTransferUnfinished, Error);

// --- Output collection and landing (SandboxOutputError family). ---------------------------------
MAF_SANDBOX_ERROR(SandboxOutputError, Error);
MAF_SANDBOX_ERROR(SandboxOutputMissing, SandboxOutputError);
MAF_SANDBOX_ERROR(SandboxOutputNotConfined, SandboxOutputError);
MAF_SANDBOX_ERROR(SandboxOutputNotRegular, SandboxOutputError);
MAF_SANDBOX_ERROR(SandboxOutputSizeUnknown, SandboxOutputError);
MAF_SANDBOX_ERROR(SandboxOutputUnreachable, SandboxOutputError);
// Any of the three transfer caps; also what read_file raises over max_bytes (refused, never cut).
MAF_SANDBOX_ERROR(SandboxTransferCapExceeded, SandboxOutputError);
MAF_SANDBOX_ERROR(SandboxLandingNotConfined, SandboxOutputError);
MAF_SANDBOX_ERROR(SandboxOutputSinkRequired, SandboxOutputError);
MAF_SANDBOX_ERROR(SandboxArtifactNameInvalid, SandboxOutputError);
MAF_SANDBOX_ERROR(SandboxArtifactNameCollision, SandboxOutputError);
MAF_SANDBOX_ERROR(SandboxLandingExists, SandboxOutputError);

// --- Retry later (SandboxTransientError family). -----------------------------------------------
// The call was valid and refused only for now: the backend is still cleaning up, or the sandbox
// was discarded after a failure. Nothing the caller asked for was done; the same call (an acquire,
// or a reacquire for a discarded sandbox) can succeed once the cleanup finishes. Not a Timeout
// (no deadline of the caller's expired) and not the output family (no output is involved).
MAF_SANDBOX_ERROR(SandboxTransientError, Error);
// An acquire refused while earlier sandboxes of its key are still being removed: a retained
// deletion that has not succeeded yet, a scope purge of the conversation that is running, or a
// dispose or purge that deleted the key's sandboxes while this acquire created one.
MAF_SANDBOX_ERROR(SandboxCleanupPending, SandboxTransientError);
// The sandbox was discarded after a failure (an exec whose outcome is unknown, a failed probe)
// and is being disposed; acquire again for a new one.
MAF_SANDBOX_ERROR(SandboxInvalidated, SandboxTransientError);

// --- TimeoutError family: exactly "the caller's timeout expired", nothing else. -----------------
MAF_SANDBOX_ERROR(Timeout, Error);
// The deadline expired before the work was started (run_code queued, a request held back by
// the service's Retry-After): it never ran, so nothing in the sandbox changed.
MAF_SANDBOX_ERROR(SandboxQueuedTimeout, Timeout);

// An exec ran past its timeout and its whole process tree was killed. Carries what the program
// printed until then (each stream's head, within the exec's cap), so the caller loses nothing it
// could have seen.
class SandboxExecTimeout : public Timeout {
  public:
    SandboxExecTimeout(const std::string& message, std::string stdout_head, std::string stderr_head)
        : Timeout(message),
          stdout_head_(std::move(stdout_head)),
          stderr_head_(std::move(stderr_head)) {}
    std::string_view type_name() const noexcept override { return "SandboxExecTimeout"; }
    const std::string& stdout_head() const noexcept { return stdout_head_; }
    const std::string& stderr_head() const noexcept { return stderr_head_; }

  private:
    std::string stdout_head_;
    std::string stderr_head_;
};

// A host-tool run outlived its deadline. `signal` says what happened to the program
// (sent, refused, absent, unrecorded, unknown) and `reach` what a kill reached (group, program,
// nothing).
class SandboxProgramTimeout : public Timeout {
  public:
    SandboxProgramTimeout(const std::string& message, std::string output, std::string signal,
                          std::string reach)
        : Timeout(message),
          output_(std::move(output)),
          signal_(std::move(signal)),
          reach_(std::move(reach)) {}
    std::string_view type_name() const noexcept override { return "SandboxProgramTimeout"; }
    const std::string& output() const noexcept { return output_; }
    const std::string& signal() const noexcept { return signal_; }
    const std::string& reach() const noexcept { return reach_; }

  private:
    std::string output_;
    std::string signal_;
    std::string reach_;
};

// --- Everything else. ---------------------------------------------------------------------------
// The backend does not implement this method (the router refuses specs that need it first).
MAF_SANDBOX_ERROR(NotImplemented, Error);
// A backend's close could not release everything it holds.
MAF_SANDBOX_ERROR(CloseError, Error);

// A conformance suite's assert_* found failing probes (conformance.hpp). Carries every result of
// the run, skips included, so a caller can print the whole table.
struct ProbeResult;
class ConformanceFailure : public Error {
  public:
    ConformanceFailure(const std::string& message, std::string suite,
                       std::shared_ptr<const std::vector<ProbeResult>> results)
        : Error(message), suite_(std::move(suite)), results_(std::move(results)) {}
    std::string_view type_name() const noexcept override { return "ConformanceFailure"; }
    const std::string& suite() const noexcept { return suite_; }
    const std::vector<ProbeResult>& results() const noexcept { return *results_; }

  private:
    std::string suite_;
    std::shared_ptr<const std::vector<ProbeResult>> results_;
};

// A system call failed. Keeps errno and says what we were doing and what the user can do.
class SystemError : public Error {
  public:
    SystemError(int error_number, const std::string& doing, const std::string& remedy = {});
    std::string_view type_name() const noexcept override { return "SystemError"; }
    int error_number() const noexcept { return error_number_; }

  private:
    int error_number_;
};

#undef MAF_SANDBOX_ERROR

}  // namespace maf_sandbox
