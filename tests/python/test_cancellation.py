"""Cancellation both ways: cancelling the asyncio task mid-exec stops the C++ exec (its process is
gone, promptly, not after the program's 30 s), and a cancelled call's cleanup leaves no sandbox
and no process on the host."""

import asyncio
import os
import subprocess
import sys
import time

import pytest

from conftest import poll, poll_async, processes_in_cgroups_naming
from maf_sandbox import (FileNotFound, Isolation, SandboxKey, SandboxRouter, SandboxSpec)

FILES = frozenset({"exec", "files_in", "files_out"})


def spec():
    from maf_sandbox import Capability
    return SandboxSpec("cancel", requires=frozenset(Capability(c) for c in FILES))


def cgroup_of(info):
    """The name of a sandbox's cgroups in every hierarchy."""
    return f"maf-sbx-{info.id}"


async def started_pid(sandbox):
    """The guest pid the exec wrote once it runs, or None while it has not."""
    try:
        text = (await sandbox.read_file("started.pid")).decode().strip()
    except FileNotFound:
        return None
    return int(text) if text else None


def test_cancelling_a_running_exec_stops_it_and_leaves_no_sandbox(local_backend):
    async def main():
        router = SandboxRouter([local_backend], min_isolation=Isolation.CONTAINER)
        key = SandboxKey("cancel", "mid-exec", "agent")
        sandbox = await router.acquire(key, spec())
        [info] = local_backend.list()

        # The call an agent host would run: acquire, exec, dispose in a finally.
        async def call():
            try:
                await sandbox.exec("echo $$ > started.pid; exec sleep 30", timeout=120)
            finally:
                await router.dispose_scope(key.scope, key.thread_id)

        task = asyncio.ensure_future(call())
        pid = await poll_async(lambda: started_pid(sandbox), timeout=60)
        assert pid, "the exec never started"
        running = await sandbox.exec(f"kill -0 {pid}")
        assert running.exit_code == 0  # seen running
        # The host check below sees this sandbox's processes while it lives.
        assert processes_in_cgroups_naming(cgroup_of(info))

        cancelled_at = time.monotonic()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return info, time.monotonic() - cancelled_at

    info, took = asyncio.run(main())
    assert took < 25, f"the cancellation waited for the program ({took:.1f} s)"
    # No sandbox: the registry has none, and no host process is left in its cgroups.
    assert local_backend.list() == ()
    assert poll(lambda: not processes_in_cgroups_naming(cgroup_of(info)), timeout=30), (
        f"processes left in {cgroup_of(info)}: {processes_in_cgroups_naming(cgroup_of(info))}")


def test_a_cancelled_exec_kills_the_program_and_the_sandbox_stays_usable(local_backend):
    async def main():
        router = SandboxRouter([local_backend], min_isolation=Isolation.CONTAINER)
        key = SandboxKey("cancel", "exec-only", "agent")
        sandbox = await router.acquire(key, spec())
        try:
            task = asyncio.ensure_future(
                sandbox.exec("echo $$ > started.pid; exec sleep 30", timeout=120))
            pid = await poll_async(lambda: started_pid(sandbox), timeout=60)
            assert pid, "the exec never started"
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task

            async def gone():
                return (await sandbox.exec(f"kill -0 {pid}")).exit_code != 0

            assert await poll_async(gone, timeout=30), "the program outlived its cancelled exec"
            after = await sandbox.exec(["echo", "still here"])
            assert after.stdout == "still here\n"
        finally:
            await router.dispose_scope(key.scope, key.thread_id)

    asyncio.run(main())


def test_a_cancellation_inside_the_core_surfaces_as_cancelled_error(local_backend, state_dir):
    # A separate interpreter stops the core's loop (what interpreter exit does) while its exec
    # runs: the core cancels the exec itself, and the awaiting task sees CancelledError, not an
    # exception of the protocol's.
    script = os.path.join(os.path.dirname(__file__), "cancel_from_core.py")
    finished = subprocess.run([sys.executable, script, state_dir], capture_output=True, text=True,
                              timeout=120)
    assert finished.returncode == 0, finished.stderr
    assert finished.stdout.strip().splitlines()[-1] == "CancelledError"
    # That interpreter could not dispose its sandbox (its loop was stopped); this one does.
    left = local_backend.list()
    assert len(left) == 1
    assert local_backend.remove(left[0].id)
