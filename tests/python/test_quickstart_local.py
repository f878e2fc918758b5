"""The seed's Quickstart in Python, on the local backend: a backend, a router whose floor the host
lowers to container on purpose, one command, a file in and out, and the conversation disposed."""

import asyncio

from maf_sandbox import (Isolation, LocalSandboxBackend, SandboxKey, SandboxRouter, SandboxSpec)


def test_the_quickstart_runs_a_command_and_moves_bytes_both_ways(local_backend):
    async def main():
        backend: LocalSandboxBackend = local_backend
        router = SandboxRouter([backend], min_isolation=Isolation.CONTAINER)
        key = SandboxKey("my-app", "conversation-1", "agent-a")
        sandbox = await router.acquire(key, SandboxSpec("quickstart"))

        result = await sandbox.exec(["python3", "-c", "print('hello from the sandbox')"])
        assert result.exit_code == 0
        assert result.stdout == "hello from the sandbox\n"
        assert result.stdout_bytes == b"hello from the sandbox\n"

        # Bytes stay bytes (no newline translation, no decoding); the text view replaces.
        payload = bytes(range(256)) + b"\r\n"
        await sandbox.write_file("data/blob.bin", payload)
        assert await sandbox.read_file("data/blob.bin") == payload
        raw = await sandbox.exec("cat data/blob.bin; printf 'err\\377' >&2; exit 3")
        assert raw.exit_code == 3
        assert raw.stdout_bytes == payload
        assert raw.stderr_bytes == b"err\xff"
        assert raw.stderr == "err\ufffd"

        purge = await router.dispose_scope(key.scope, key.thread_id)  # conversation over
        assert purge.disposed == 1 and purge.undisposed is None
        assert backend.list() == ()

    asyncio.run(main())


def test_the_backend_declares_its_real_rung_and_what_it_serves(local_backend):
    assert local_backend.isolation is Isolation.CONTAINER
    declarations = local_backend.declarations
    assert "exec" in {c.value for c in declarations.capabilities}
    assert declarations.limits.files_in.max_bytes_per_file > 0
