"""SandboxRouter: where the host's policy meets a backend's declarations."""

from __future__ import annotations

from typing import Iterable, Optional, Sequence

from . import _aio, _native
from .sandbox import Sandbox
from .types import (Capability, DisposalFailure, Identity, Isolation, IsolationScope, SandboxKey,
                    SandboxSpec, ScopePurge, _failure, _purge)


class SandboxRouter:
    """Selects one backend at construction (``selected``, or the first) and refuses, per spec,
    whatever it cannot honour; it never substitutes another backend or weakens a spec. The
    default floor is ``microvm``: a local backend (``container``) needs
    ``min_isolation=Isolation.CONTAINER`` from the host."""

    def __init__(self, backends: Sequence, *, min_isolation: Isolation = Isolation.MICROVM,
                 selected: Optional[str] = None,
                 denied_capabilities: Iterable[Capability] = (),
                 denied_identities: Iterable[Identity] = (),
                 min_isolation_scope: IsolationScope = IsolationScope.CONVERSATION):
        self._backends = list(backends)
        self._native = _native.Router([backend._native for backend in self._backends], {
            "min_isolation": Isolation(min_isolation).value,
            "selected": selected,
            "denied_capabilities": [Capability(c).value for c in denied_capabilities],
            "denied_identities": [Identity(i).value for i in denied_identities],
            "min_isolation_scope": IsolationScope(min_isolation_scope).value,
        })

    @property
    def enabled(self) -> bool:
        return self._native.enabled

    @property
    def min_isolation(self) -> Isolation:
        return Isolation(self._native.min_isolation)

    @property
    def backend(self):
        """The selected backend, or None when none is registered."""
        name = self._native.backend_name
        return next((b for b in self._backends if b.name == name), None)

    def ensure_can_serve(self, spec: SandboxSpec) -> None:
        """The per-spec checks, in the protocol's order; raises the first refusal."""
        self._native.ensure_can_serve(spec._native())

    async def acquire(self, key: SandboxKey, spec: SandboxSpec) -> Sandbox:
        native_key, native_spec = key._native(), spec._native()
        return Sandbox(await _aio.run(
            lambda done: self._native.acquire(done, native_key, native_spec)))

    async def dispose(self, key: SandboxKey, kind: Optional[str] = None) -> Optional[DisposalFailure]:
        """Fans out to every registered backend; never raises (but cancellation)."""
        native_key = key._native()
        return _failure(await _aio.run(lambda done: self._native.dispose(done, native_key, kind)))

    async def dispose_scope(self, scope: str, thread_id: str) -> ScopePurge:
        """Deletes every sandbox of the conversation on every backend; never raises."""
        return _purge(await _aio.run(
            lambda done: self._native.dispose_scope(done, scope, thread_id)))

    async def dispose_kind(self, key: SandboxKey, kind: str, timeout: float = 60.0) -> bool:
        """True when the kind's sandbox was disposed everywhere within ``timeout``: require it
        before re-acquiring the key with a changed egress policy."""
        native_key = key._native()
        return await _aio.run(
            lambda done: self._native.dispose_kind(done, native_key, kind, float(timeout)))
