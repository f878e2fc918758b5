"""The protocol's vocabulary and data types, as the seed's Python package spells them.

Each enum's values are the strings of the core's one table (src/core/vocabulary.cpp); the core
parses them again on the way in, so a value it does not know is refused there, never guessed.
"""

from __future__ import annotations

import dataclasses
import enum
from typing import Mapping, Optional, Sequence, Tuple, Union

MiB = 1024 * 1024


class Isolation(str, enum.Enum):
    """The isolation ladder, weakest first."""

    NONE = "none"
    RUNTIME = "runtime"
    OS_PROCESS = "os_process"
    CONTAINER = "container"
    HARDENED_CONTAINER = "hardened_container"
    MICROVM = "microvm"
    VM = "vm"


class Capability(str, enum.Enum):
    EXEC = "exec"
    RUN_CODE = "run_code"
    HOST_TOOLS = "host_tools"
    FILES_IN = "files_in"
    FILES_OUT = "files_out"
    FILES_LIST = "files_list"
    FILES_DELETE = "files_delete"
    SNAPSHOT = "snapshot"
    RECLAIM = "reclaim"
    ATTACHED_IDENTITY = "attached_identity"
    EGRESS_METHODS = "egress_methods"
    # The backend delivers exec output as it is produced (not yet bound in Python: docs/python.md).
    STREAMING_EXEC = "streaming_exec"
    TERMINAL = "terminal"


class Egress(str, enum.Enum):
    UNRESTRICTED = "unrestricted"
    ALLOWLIST = "allowlist"
    CLOSED = "closed"


class OsFamily(str, enum.Enum):
    POSIX = "posix"
    WINDOWS = "windows"


class EntryKind(str, enum.Enum):
    FILE = "file"
    DIRECTORY = "directory"
    SYMLINK = "symlink"
    OTHER = "other"


class IsolationScope(str, enum.Enum):
    CONVERSATION = "conversation"
    CALL = "call"


class OutputDisposition(str, enum.Enum):
    LAND = "land"
    CONSUME = "consume"


class Identity(str, enum.Enum):
    APP = "app"
    USER = "user"


class DisposalCode(str, enum.Enum):
    UNREACHABLE = "unreachable"
    TIMEOUT = "timeout"
    REFUSED = "refused"
    UNLISTED = "unlisted"
    UNKNOWN = "unknown"


# Which of the core's tables each enum mirrors (a test checks every member against it).
VOCABULARIES = {
    "isolation": Isolation,
    "capability": Capability,
    "egress": Egress,
    "os_family": OsFamily,
    "entry_kind": EntryKind,
    "isolation_scope": IsolationScope,
    "output_disposition": OutputDisposition,
    "identity": Identity,
    "disposal_code": DisposalCode,
}


@dataclasses.dataclass(frozen=True)
class TransferLimits:
    max_bytes_per_file: int
    max_total_bytes: int
    max_files: int

    def within(self, ceiling: "TransferLimits") -> bool:
        return (self.max_bytes_per_file <= ceiling.max_bytes_per_file
                and self.max_total_bytes <= ceiling.max_total_bytes
                and self.max_files <= ceiling.max_files)

    def _native(self) -> Tuple[int, int, int]:
        return (self.max_bytes_per_file, self.max_total_bytes, self.max_files)


DEFAULT_TRANSFER_LIMITS = TransferLimits(8 * MiB, 32 * MiB, 64)
DEFAULT_CAPABILITIES = frozenset({Capability.EXEC, Capability.FILES_IN})


@dataclasses.dataclass(frozen=True)
class SandboxLimits:
    files_in: TransferLimits = DEFAULT_TRANSFER_LIMITS
    files_out: TransferLimits = DEFAULT_TRANSFER_LIMITS


@dataclasses.dataclass(frozen=True)
class SandboxKey:
    """Who asks: scope and thread come from the host's request context, never from model input.
    ``call_id`` names one tool call at isolation scope CALL (empty otherwise)."""

    scope: str
    thread_id: str
    agent_dir: str = ""
    call_id: str = ""

    def _native(self) -> Tuple[str, str, str, str]:
        return (self.scope, self.thread_id, self.agent_dir, self.call_id)


@dataclasses.dataclass(frozen=True)
class DeclaredOutput:
    path: str
    disposition: OutputDisposition = OutputDisposition.LAND
    media_type: Optional[str] = None
    required: bool = True
    name: Optional[str] = None


@dataclasses.dataclass(frozen=True)
class SandboxSpec:
    """What a workload asks for, in the seed's field order. The core validates it when it is
    used (an empty kind, or egress_allow without ALLOWLIST, raise InvalidArgument)."""

    kind: str
    image: Optional[str] = None
    image_id: Optional[str] = None
    egress_allow: Tuple[str, ...] = ()
    work_dir: Optional[str] = None
    labels: Mapping[str, str] = dataclasses.field(default_factory=dict)
    requires: frozenset = DEFAULT_CAPABILITIES
    min_isolation: Optional[Isolation] = None
    declared_outputs: Tuple[DeclaredOutput, ...] = ()
    files_in: TransferLimits = DEFAULT_TRANSFER_LIMITS
    files_out: TransferLimits = DEFAULT_TRANSFER_LIMITS
    outputs_named_at_call_time: bool = False
    egress: Egress = Egress.CLOSED
    requires_os_family: Optional[OsFamily] = None
    isolation_scope: IsolationScope = IsolationScope.CONVERSATION

    def _native(self) -> dict:
        return {
            "kind": self.kind,
            "image": self.image,
            "image_id": self.image_id,
            "egress_allow": list(self.egress_allow),
            "work_dir": self.work_dir,
            "labels": dict(self.labels),
            "requires": [Capability(c).value for c in self.requires],
            "min_isolation": _value(self.min_isolation, Isolation),
            "declared_outputs": [{
                "path": o.path,
                "disposition": OutputDisposition(o.disposition).value,
                "media_type": o.media_type,
                "required": o.required,
                "name": o.name,
            } for o in self.declared_outputs],
            "files_in": self.files_in._native(),
            "files_out": self.files_out._native(),
            "outputs_named_at_call_time": self.outputs_named_at_call_time,
            "egress": Egress(self.egress).value,
            "requires_os_family": _value(self.requires_os_family, OsFamily),
            "isolation_scope": IsolationScope(self.isolation_scope).value,
        }


def _value(member, enum_type) -> Optional[str]:
    return None if member is None else enum_type(member).value


class ExecResult:
    """What an exec returned: the program's bytes, untouched, and its faithful exit code (a
    signal reads as 128 + N). ``stdout`` and ``stderr`` are UTF-8 text views with replacement
    decoding, for display; use the byte fields for artifacts and byte counts."""

    __slots__ = ("stdout_bytes", "stderr_bytes", "exit_code")

    def __init__(self, stdout_bytes: bytes = b"", stderr_bytes: bytes = b"", exit_code: int = 0):
        self.stdout_bytes = stdout_bytes
        self.stderr_bytes = stderr_bytes
        self.exit_code = exit_code

    @property
    def stdout(self) -> str:
        return self.stdout_bytes.decode("utf-8", errors="replace")

    @property
    def stderr(self) -> str:
        return self.stderr_bytes.decode("utf-8", errors="replace")

    stdout_text = stdout
    stderr_text = stderr

    def __repr__(self) -> str:
        return (f"ExecResult(exit_code={self.exit_code}, stdout_bytes={self.stdout_bytes!r}, "
                f"stderr_bytes={self.stderr_bytes!r})")


@dataclasses.dataclass(frozen=True)
class SandboxEntry:
    path: str
    kind: EntryKind
    size_bytes: Optional[int] = None


@dataclasses.dataclass(frozen=True)
class DisposalFailure:
    code: DisposalCode
    detail: str = ""


@dataclasses.dataclass(frozen=True)
class ScopePurge:
    disposed: int = 0
    undisposed: Optional[DisposalFailure] = None


@dataclasses.dataclass(frozen=True)
class SandboxReplacement:
    previous_id: str
    reason: str


@dataclasses.dataclass(frozen=True)
class BackendDeclarations:
    capabilities: frozenset
    limits: SandboxLimits
    egress_modes: frozenset
    os_families: frozenset
    isolation_scopes: frozenset


Command = Union[str, Sequence[str]]


def _failure(raw) -> Optional[DisposalFailure]:
    return None if raw is None else DisposalFailure(DisposalCode(raw[0]), raw[1])


def _purge(raw) -> ScopePurge:
    return ScopePurge(raw[0], _failure(raw[1]))


def _entry(raw) -> SandboxEntry:
    return SandboxEntry(raw[0], EntryKind(raw[1]), raw[2])


def _declarations(raw: dict) -> BackendDeclarations:
    return BackendDeclarations(
        capabilities=frozenset(Capability(c) for c in raw["capabilities"]),
        limits=SandboxLimits(TransferLimits(*raw["files_in"]), TransferLimits(*raw["files_out"])),
        egress_modes=frozenset(Egress(e) for e in raw["egress_modes"]),
        os_families=frozenset(OsFamily(f) for f in raw["os_families"]),
        isolation_scopes=frozenset(IsolationScope(s) for s in raw["isolation_scopes"]),
    )
