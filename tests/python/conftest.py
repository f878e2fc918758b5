"""Shared fixtures: a local backend on a state directory of its own, removed with everything in it
after the test, its sandboxes purged first."""

import asyncio
import os
import shutil
import tempfile
import time

import pytest

import maf_sandbox


@pytest.fixture
def state_dir():
    path = tempfile.mkdtemp(prefix="maf-python-test-")
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def local_backend(state_dir):
    backend = maf_sandbox.LocalSandboxBackend(state_dir, idle_timeout_seconds=300,
                                              max_lifetime_seconds=900)
    try:
        yield backend
    finally:
        # Whatever a failed test left: every sandbox of this state directory goes.
        for info in backend.list():
            backend.remove(info.id)


def poll(condition, timeout=30.0, interval=0.05):
    """Polls `condition` (a callable) until it is truthy or `timeout` passes; returns its value."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value or time.monotonic() >= deadline:
            return value
        time.sleep(interval)


async def poll_async(condition, timeout=30.0, interval=0.05):
    """The same for a coroutine function."""
    deadline = time.monotonic() + timeout
    while True:
        value = await condition()
        if value or time.monotonic() >= deadline:
            return value
        await asyncio.sleep(interval)


def processes_in_cgroups_naming(fragment):
    """Host pids whose cgroup path names `fragment` (a sandbox's id)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cgroup", encoding="utf-8") as cgroups:
                if fragment in cgroups.read():
                    found.append(int(entry))
        except OSError:
            continue  # gone meanwhile
    return found
