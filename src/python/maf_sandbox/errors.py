"""The protocol's errors, in the hierarchy of the C++ core's (include/maf_sandbox/core/errors.hpp).

Every error the core raises arrives as the class of this module matching its most derived C++
type, with the message (every layer's context included) as ``str(error)``, the message as first
raised as ``error.cause``, and the fields its C++ type carries as attributes. Each family also
subclasses the builtin the seed's protocol uses for it, so ``except TimeoutError`` or
``except ValueError`` keep working: a confinement escape is a ValueError, a policy refusal a
PermissionError, a file refusal an OSError, an expired timeout a TimeoutError.
"""


class SandboxError(Exception):
    """The base of every protocol error (the core's ``Error``)."""

    cause: str = ""


Error = SandboxError

# --- ValueError family: the caller asked for something that cannot be valid. ------------------


class InvalidArgument(SandboxError, ValueError):
    pass


class ConfinementEscape(InvalidArgument):
    """A guest path outside its working directory, through a link, or the directory itself."""


class SandboxExecOutputLimitExceeded(InvalidArgument):
    """Exec output over max_output_bytes: ``stdout_head``, ``stderr_head`` (bytes),
    ``total_bytes`` and ``exit_code`` (-1 when the program was killed for it)."""

    stdout_head: bytes = b""
    stderr_head: bytes = b""
    total_bytes: int = 0
    exit_code: int = -1


ExecOutputLimitExceeded = SandboxExecOutputLimitExceeded

# --- Router refusals (PermissionError family): the host's policy forbids this. -----------------


class PolicyRefusal(SandboxError, PermissionError):
    pass


class SandboxBackendNotPermitted(PolicyRefusal):
    pass


class SandboxCapabilityDenied(PolicyRefusal):
    pass


class SandboxIdentityDenied(PolicyRefusal):
    pass


class SandboxEgressNotEnforced(PolicyRefusal):
    pass


class EgressPolicyConflict(SandboxEgressNotEnforced):
    """Warm reuse asked for another egress policy than the live sandbox's; it is kept."""


class SandboxTransferLimitsNotPermitted(PolicyRefusal):
    pass


# --- The backend cannot do what the spec needs (RuntimeError family). --------------------------


class NoSandboxBackend(SandboxError, LookupError):
    pass


class SandboxCapabilityNotSupported(SandboxError, RuntimeError):
    pass


class SandboxOsFamilyNotSupported(SandboxError, RuntimeError):
    pass


class SandboxIsolationScopeNotSupported(SandboxError, RuntimeError):
    pass


class SandboxCapacityExceeded(SandboxError, RuntimeError):
    """The host has no room for another sandbox (a host-wide budget); nothing was made."""


# --- OSError family: a guest file operation was refused (``errno`` where there is one). --------


class FileError(SandboxError, OSError):
    pass


class NotADirectory(FileError, NotADirectoryError):
    pass


class FileNotFound(FileError, FileNotFoundError):
    pass


class IsADirectory(FileError, IsADirectoryError):
    pass


class PermissionDenied(FileError, PermissionError):
    pass


class SandboxFileRefused(FileError):
    """A guest-side refusal; ``refusal`` names it (not_found, is_directory, ...)."""

    refusal: str = ""


class SandboxFilePermissionRefused(SandboxFileRefused, PermissionDenied):
    pass


class SandboxShellTransferFailed(SandboxError):
    """The transfer failed cleanly: the staged file was taken back, the sandbox is whole."""


class SandboxShellTransferUnfinished(SandboxError):
    """The transfer stopped mid-command: discard the sandbox."""


# --- Output collection and landing (SandboxOutputError family). --------------------------------


class SandboxOutputError(SandboxError, RuntimeError):
    pass


class SandboxOutputMissing(SandboxOutputError):
    pass


class SandboxOutputNotConfined(SandboxOutputError):
    pass


class SandboxOutputNotRegular(SandboxOutputError):
    pass


class SandboxOutputSizeUnknown(SandboxOutputError):
    pass


class SandboxOutputUnreachable(SandboxOutputError):
    pass


class SandboxTransferCapExceeded(SandboxOutputError):
    """Any of the transfer caps; also a read over max_bytes (refused, never truncated)."""


class SandboxLandingNotConfined(SandboxOutputError):
    pass


class SandboxOutputSinkRequired(SandboxOutputError):
    pass


class SandboxArtifactNameInvalid(SandboxOutputError):
    pass


class SandboxArtifactNameCollision(SandboxOutputError):
    pass


class SandboxLandingExists(SandboxOutputError):
    pass


# --- Retry later (SandboxTransientError family). -----------------------------------------------


class SandboxTransientError(SandboxError):
    """Refused only for now: the same call can succeed once the backend's cleanup finishes."""


class SandboxCleanupPending(SandboxTransientError):
    pass


class SandboxInvalidated(SandboxTransientError):
    pass


# --- TimeoutError family: exactly "the caller's timeout expired". -------------------------------


class Timeout(SandboxError, TimeoutError):
    pass


SandboxTimeout = Timeout


class SandboxQueuedTimeout(Timeout):
    """The deadline expired before the work started: nothing in the sandbox changed."""


class SandboxProgramTimeout(Timeout):
    """A host-tool run outlived its deadline: ``output``, ``signal``, ``reach``."""

    output: str = ""
    signal: str = "unknown"
    reach: str = "nothing"


# --- Everything else. ---------------------------------------------------------------------------


class SandboxNotImplemented(SandboxError, NotImplementedError):
    pass


class CloseError(SandboxError):
    pass


class ConformanceFailure(SandboxError, AssertionError):
    suite: str = ""


class SandboxSystemError(SandboxError, OSError):
    """A system call failed (``errno``)."""


# --- The ACAS backend's refinements of the families above. -------------------------------------


class AcasEgressPolicyConflict(EgressPolicyConflict):
    pass


class AcasEntryPayloadIncomplete(SandboxError):
    pass


class AcasClientCloseError(CloseError):
    pass


class AcasBackendClosed(SandboxError):
    pass


class AcasCredentialError(SandboxError):
    pass


class AcasServiceError(SandboxError):
    """The service answered with an error status: ``status`` and ``code``."""

    status: int = 0
    code: str = ""


class AcasAuthorizationError(AcasServiceError):
    pass


class AcasServiceUnreachable(SandboxError):
    pass


class AcasThrottled(SandboxQueuedTimeout):
    pass


class AcasRequestOutcomeUnknown(SandboxError):
    pass


class AcasExecCaptureFailed(SandboxError):
    pass


class AcasEmulatorMismatch(InvalidArgument):
    pass


__all__ = [name for name, value in list(globals().items())
           if isinstance(value, type) and issubclass(value, SandboxError)]
