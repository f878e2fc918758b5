"""Helper of test_cancellation.py: starts an exec, then stops the core's loop from another thread
(as interpreter exit does) and prints what the awaiting task saw."""

import asyncio
import sys

from maf_sandbox import (FileNotFound, Isolation, LocalSandboxBackend, SandboxKey, SandboxRouter,
                         SandboxSpec, _native)
from maf_sandbox.types import Capability


async def main(state_dir):
    backend = LocalSandboxBackend(state_dir, idle_timeout_seconds=300, max_lifetime_seconds=900)
    router = SandboxRouter([backend], min_isolation=Isolation.CONTAINER)
    spec = SandboxSpec("cancel", requires=frozenset(
        {Capability.EXEC, Capability.FILES_IN, Capability.FILES_OUT}))
    sandbox = await router.acquire(SandboxKey("cancel", "from-core", "agent"), spec)
    task = asyncio.ensure_future(sandbox.exec("echo $$ > started.pid; exec sleep 30", timeout=120))
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 60
    while loop.time() < deadline:
        try:
            if (await sandbox.read_file("started.pid")).strip():
                break
        except FileNotFound:
            pass
        await asyncio.sleep(0.05)
    stopping = loop.run_in_executor(None, _native.shutdown)
    try:
        await task
        print("finished")
    except asyncio.CancelledError:
        print("CancelledError")
    except BaseException as error:  # noqa: BLE001 (what it saw is the answer)
        print(type(error).__name__, error)
    await stopping


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
