"""The core's error hierarchy as Python exceptions: the class of the most derived C++ type, a
subclass of the family's base and of the builtin the seed uses, with the message."""

import asyncio

import pytest

import maf_sandbox
from maf_sandbox import (Isolation, SandboxKey, SandboxRouter, SandboxSpec, _native)
from maf_sandbox.types import VOCABULARIES


def test_an_exec_that_outlives_its_timeout_raises_the_timeout_subclass(local_backend):
    async def main():
        router = SandboxRouter([local_backend], min_isolation=Isolation.CONTAINER)
        key = SandboxKey("errors", "timeout", "agent")
        sandbox = await router.acquire(key, SandboxSpec("errors"))
        with pytest.raises(maf_sandbox.Timeout) as raised:
            await sandbox.exec("sleep 30", timeout=1.0)
        await router.dispose_scope(key.scope, key.thread_id)
        return raised.value

    error = asyncio.run(main())
    assert isinstance(error, maf_sandbox.SandboxError)
    assert isinstance(error, TimeoutError)
    assert not isinstance(error, maf_sandbox.SandboxQueuedTimeout)
    assert "longer than its 1 s timeout" in str(error)
    assert error.cause == str(error) or str(error).endswith(error.cause)


def test_a_router_refusal_is_a_policy_refusal_and_a_permission_error(local_backend):
    # The default floor is microvm; the local backend is a container.
    with pytest.raises(maf_sandbox.SandboxBackendNotPermitted) as raised:
        SandboxRouter([local_backend])
    assert isinstance(raised.value, maf_sandbox.PolicyRefusal)
    assert isinstance(raised.value, PermissionError)
    assert isinstance(raised.value, maf_sandbox.SandboxError)
    assert "container" in str(raised.value)


def test_file_refusals_keep_their_family_and_builtin(local_backend):
    async def main():
        router = SandboxRouter([local_backend], min_isolation=Isolation.CONTAINER)
        key = SandboxKey("errors", "files", "agent")
        sandbox = await router.acquire(
            key, SandboxSpec("errors", requires=frozenset({maf_sandbox.Capability.EXEC,
                                                           maf_sandbox.Capability.FILES_IN,
                                                           maf_sandbox.Capability.FILES_OUT})))
        try:
            with pytest.raises(maf_sandbox.ConfinementEscape) as escape:
                await sandbox.write_file("../outside", b"x")
            with pytest.raises(maf_sandbox.FileNotFound) as missing:
                await sandbox.read_file("no-such-file")
            await sandbox.write_file("big", b"x" * 100)
            with pytest.raises(maf_sandbox.SandboxTransferCapExceeded) as over:
                await sandbox.read_file("big", max_bytes=10)
        finally:
            await router.dispose_scope(key.scope, key.thread_id)
        return escape.value, missing.value, over.value

    escape, missing, over = asyncio.run(main())
    assert isinstance(escape, maf_sandbox.InvalidArgument) and isinstance(escape, ValueError)
    assert isinstance(missing, maf_sandbox.FileError) and isinstance(missing, FileNotFoundError)
    assert isinstance(over, maf_sandbox.SandboxOutputError)
    for error in (escape, missing, over):
        assert isinstance(error, maf_sandbox.SandboxError) and str(error) and error.cause


def test_an_invalid_spec_is_refused_synchronously_by_the_core(local_backend):
    router = SandboxRouter([local_backend], min_isolation=Isolation.CONTAINER)
    with pytest.raises(maf_sandbox.InvalidArgument) as raised:
        router.ensure_can_serve(SandboxSpec("k", egress_allow=("example.com",)))
    assert "example.com" in str(raised.value)


def test_every_python_enum_member_is_a_string_of_the_core_table():
    for vocabulary, enum_type in VOCABULARIES.items():
        for member in enum_type:
            assert _native.canonical(vocabulary, member.value) == member.value
    with pytest.raises(maf_sandbox.InvalidArgument):
        _native.canonical("isolation", "process")  # the old rung name is refused forever
