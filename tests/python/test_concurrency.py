"""Many acquires and execs at once from asyncio.gather, all on the core's one loop thread."""

import asyncio

from maf_sandbox import (Capability, Isolation, SandboxKey, SandboxRouter, SandboxSpec)

CONVERSATIONS = 3
EXECS_PER_SANDBOX = 8
SPEC = SandboxSpec("gather", requires=frozenset(
    {Capability.EXEC, Capability.FILES_IN, Capability.FILES_OUT}))


def test_gathered_acquires_and_execs_each_get_their_own_answer(local_backend):
    async def main():
        router = SandboxRouter([local_backend], min_isolation=Isolation.CONTAINER)
        keys = [SandboxKey("gather", f"conversation-{n}", "agent") for n in range(CONVERSATIONS)]
        try:
            sandboxes = await asyncio.gather(*(router.acquire(key, SPEC) for key in keys))

            async def one(n, sandbox, i):
                result = await sandbox.exec(["sh", "-c", f"echo {n}:{i}; echo err{i} >&2"])
                return n, i, result

            results = await asyncio.gather(*(one(n, sandbox, i)
                                             for n, sandbox in enumerate(sandboxes)
                                             for i in range(EXECS_PER_SANDBOX)))
            for n, i, result in results:
                assert result.exit_code == 0
                assert result.stdout == f"{n}:{i}\n"
                assert result.stderr == f"err{i}\n"
            assert len(results) == CONVERSATIONS * EXECS_PER_SANDBOX
            assert len(local_backend.list()) == CONVERSATIONS
        finally:
            purges = await asyncio.gather(*(router.dispose_scope(k.scope, k.thread_id)
                                            for k in keys))
        assert sum(p.disposed for p in purges) == CONVERSATIONS
        assert local_backend.list() == ()

    asyncio.run(main())


def test_gathered_acquires_of_one_key_share_one_sandbox(local_backend):
    async def main():
        router = SandboxRouter([local_backend], min_isolation=Isolation.CONTAINER)
        key = SandboxKey("gather", "one-key", "agent")
        try:
            first, *others = await asyncio.gather(*(router.acquire(key, SPEC) for _ in range(4)))
            await first.write_file("mark", b"written by the first")
            for other in others:
                assert await other.read_file("mark") == b"written by the first"
            assert len(local_backend.list()) == 1
        finally:
            await router.dispose_scope(key.scope, key.thread_id)

    asyncio.run(main())
