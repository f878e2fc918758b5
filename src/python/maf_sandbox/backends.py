"""The two backends: LocalSandboxBackend (this machine's namespaces, cgroups and seccomp) and
AcasSandboxBackend (Azure Container Apps Sandboxes, or an acas-emulator), over the C++ core's
LocalBackend and AcasBackend."""

from __future__ import annotations

import dataclasses
from typing import Dict, Optional, Tuple

from . import _aio, _native
from .sandbox import Sandbox
from .types import (BackendDeclarations, DisposalFailure, Isolation, SandboxKey, SandboxSpec,
                    ScopePurge, _declarations, _failure, _purge)


class _Backend:
    """What both backends share: the protocol's SandboxBackend."""

    def __init__(self, native):
        self._native = native

    @property
    def name(self) -> str:
        return self._native.name

    @property
    def isolation(self) -> Isolation:
        """The rung this backend really provides on this machine."""
        return Isolation(self._native.isolation)

    @property
    def declarations(self) -> BackendDeclarations:
        return _declarations(self._native.declarations())

    async def acquire(self, key: SandboxKey, spec: SandboxSpec) -> Sandbox:
        """Get-or-create keyed (key, spec.kind); concurrent acquires of one key are serialised.
        Direct callers skip the router's host checks (the backend's own still run)."""
        native_key, native_spec = key._native(), spec._native()
        return Sandbox(await _aio.run(
            lambda done: self._native.acquire(done, native_key, native_spec)))

    async def dispose(self, key: SandboxKey, *, kind: Optional[str] = None) -> Optional[DisposalFailure]:
        """Deletes the key's sandbox of ``kind``, or of every kind; a failure is returned, never
        raised."""
        native_key = key._native()
        return _failure(await _aio.run(lambda done: self._native.dispose(done, native_key, kind)))

    async def dispose_scope(self, scope: str, thread_id: str) -> ScopePurge:
        """Deletes every sandbox of one conversation, found by label, not from process memory."""
        return _purge(await _aio.run(
            lambda done: self._native.dispose_scope(done, scope, thread_id)))

    async def aclose(self) -> None:
        """Releases clients and connections (not sandboxes); the backend then refuses new work."""
        await _aio.run(lambda done: self._native.close(done))

    close = aclose


class LocalSandboxBackend(_Backend):
    """Sandboxes on this machine (isolation ``container``): recorded under ``state_dir`` (unset:
    $MAF_SANDBOX_STATE_DIR or /var/lib/maf-sandbox), so they outlive this process and any
    process can reuse or purge them. Needs root."""

    def __init__(self, state_dir: Optional[str] = None, *, default_image: str = "host",
                 memory_bytes: Optional[int] = None, pids: Optional[int] = None,
                 cpus: Optional[float] = None, disk_bytes: Optional[int] = None,
                 tmp_bytes: Optional[int] = None, idle_timeout_seconds: Optional[int] = 3600,
                 max_lifetime_seconds: Optional[int] = 86400, root_inside: bool = False,
                 default_max_output_bytes: Optional[int] = None, pool_size: int = 0,
                 owned_by_this_process: bool = False):
        super().__init__(_native.local_backend({
            "state_dir": None if state_dir is None else str(state_dir),
            "default_image": default_image,
            "memory_bytes": memory_bytes,
            "pids": pids,
            "cpus": cpus,
            "disk_bytes": disk_bytes,
            "tmp_bytes": tmp_bytes,
            "idle_timeout_seconds": idle_timeout_seconds or 0,
            "max_lifetime_seconds": max_lifetime_seconds or 0,
            "root_inside": root_inside,
            "default_max_output_bytes": default_max_output_bytes,
            "pool_size": pool_size,
            "owned_by_this_process": owned_by_this_process,
        }))

    def list(self, *selector: str) -> Tuple[LocalSandboxInfo, ...]:
        """The sandboxes of this state directory whose labels match every ``k=v`` of
        ``selector`` (none: all of them). Blocking; read from the registry, not from memory."""
        return tuple(LocalSandboxInfo(*raw) for raw in self._native.local_list(list(selector)))

    def remove(self, sandbox_id: str) -> bool:
        """Destroys one sandbox by id; False when there is none. Blocking."""
        return self._native.local_remove(sandbox_id)


@dataclasses.dataclass(frozen=True)
class LocalSandboxInfo:
    """What ``LocalSandboxBackend.list()`` shows about one sandbox."""

    id: str
    labels: Dict[str, str]
    image: str
    state: str  # creating, running, stopping, dead


@dataclasses.dataclass(frozen=True)
class AcasSandboxConfig:
    """Where the ACAS backend's sandboxes live and how long its operations may take. Against the
    service, leave ``token`` and ``ca_file`` unset: DefaultAzureCredential resolves the identity.
    Against an acas-emulator, ``ca_file`` is its ca.pem and ``token`` its bearer token."""

    endpoint: str
    subscription_id: str
    resource_group: str
    sandbox_group: str
    registry: str = ""
    ca_file: Optional[str] = None
    token: Optional[str] = None
    emulator: bool = False
    auto_suspend_seconds: int = 60
    auto_delete_seconds: int = 600
    read_timeout_seconds: float = 120.0
    create_timeout_seconds: float = 300.0
    delete_timeout_seconds: float = 300.0
    resume_timeout_seconds: float = 120.0
    probe_timeout_seconds: float = 30.0
    poll_interval_seconds: float = 3.0
    exec_output_limit_bytes: int = 1024 * 1024
    max_clients_per_loop: int = 32
    client_wait_seconds: float = 30.0
    client_close_seconds: float = 30.0
    silence_preview_warning: bool = False


class AcasSandboxBackend(_Backend):
    """The ACAS data plane as a backend (the core's AcasBackend). It declares ``microvm`` against
    the service; against an emulator, the rung the emulator names (call ``discover()`` first)."""

    def __init__(self, config: AcasSandboxConfig):
        self.config = config
        super().__init__(_native.acas_backend(dataclasses.asdict(config)))

    async def discover(self) -> None:
        """One catalogue request that learns an emulator's rung (and, off emulator mode, proves
        the endpoint is no emulator). Call it before handing an emulator's backend to a router."""
        await _aio.run(lambda done: self._native.discover(done))
