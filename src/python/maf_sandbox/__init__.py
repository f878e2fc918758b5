"""maf_sandbox: sandboxes for agent-authored code, from asyncio.

The C++ core (the local runtime, the ACAS backend, the router) runs on an event loop thread of its
own; every coroutine here awaits its work there (see _aio.py for cancellation).
"""

import atexit as _atexit

from . import _native
from .backends import (AcasSandboxBackend, AcasSandboxConfig, LocalSandboxBackend,
                       LocalSandboxInfo)
from .errors import *  # noqa: F401,F403 (the protocol's exception hierarchy)
from .errors import __all__ as _error_names
from .router import SandboxRouter
from .sandbox import Sandbox
from .types import (DEFAULT_CAPABILITIES, DEFAULT_TRANSFER_LIMITS, BackendDeclarations, Capability,
                    DeclaredOutput, DisposalCode, DisposalFailure, Egress, EntryKind, ExecResult,
                    Identity, Isolation, IsolationScope, OsFamily, OutputDisposition, SandboxEntry,
                    SandboxKey, SandboxLimits, SandboxReplacement, SandboxSpec, ScopePurge,
                    TransferLimits)

# At interpreter exit: cancel what still runs in the core and let its cleanup finish.
_atexit.register(_native.shutdown)

__all__ = [
    "AcasSandboxBackend", "AcasSandboxConfig", "LocalSandboxBackend", "LocalSandboxInfo",
    "SandboxRouter", "Sandbox",
    "DEFAULT_CAPABILITIES", "DEFAULT_TRANSFER_LIMITS", "BackendDeclarations", "Capability",
    "DeclaredOutput", "DisposalCode", "DisposalFailure", "Egress", "EntryKind", "ExecResult",
    "Identity", "Isolation", "IsolationScope", "OsFamily", "OutputDisposition", "SandboxEntry",
    "SandboxKey", "SandboxLimits", "SandboxReplacement", "SandboxSpec", "ScopePurge",
    "TransferLimits",
] + list(_error_names)
