"""One running guest: exec and the file methods, each an asyncio coroutine over the core."""

from __future__ import annotations

from typing import Mapping, Optional, Sequence, Union

from . import _aio
from .types import (DEFAULT_TRANSFER_LIMITS, ExecResult, SandboxEntry, SandboxReplacement, _entry)


class Sandbox:
    """A sandbox a backend or the router handed out. Paths are POSIX-shaped and relative to
    ``working_directory`` (absolute paths inside it are accepted); a relative working directory
    resolves beneath ``base_directory``, and an empty one names the base itself."""

    __slots__ = ("_native",)

    def __init__(self, native):
        self._native = native

    @property
    def base_directory(self) -> str:
        return self._native.base_directory

    @property
    def replaced(self) -> Optional[SandboxReplacement]:
        """Set on the first acquire after the key's previous sandbox was discarded: whatever
        was left in the old one is gone. Show it to whoever relies on that state."""
        raw = self._native.replaced
        return None if raw is None else SandboxReplacement(*raw)

    async def exec(self, command: Union[str, Sequence[str]], *, working_directory: str = "",
                   timeout: float = 60.0, env: Optional[Mapping[str, str]] = None,
                   stdin: Union[bytes, str] = b"",
                   max_output_bytes: Optional[int] = None) -> ExecResult:
        """Runs an argv (quoted before any shell) or a shell command line. Raises Timeout (a
        TimeoutError) when exactly ``timeout`` expired, with the whole process tree killed;
        SandboxExecOutputLimitExceeded when a stream went over ``max_output_bytes``."""
        if not isinstance(command, str):
            command = [str(argument) for argument in command]
        if isinstance(stdin, str):
            stdin = stdin.encode("utf-8")
        environment = dict(env or {})
        raw = await _aio.run(lambda done: self._native.exec(
            done, command, working_directory, float(timeout), environment, bytes(stdin),
            max_output_bytes))
        return ExecResult(*raw)

    async def write_file(self, path: str, content: Union[bytes, str], *,
                         working_directory: str = "") -> None:
        """Writes bytes verbatim (a str as UTF-8), creating parents; replaces, never appends."""
        if isinstance(content, str):
            content = content.encode("utf-8")
        await _aio.run(lambda done: self._native.write_file(done, path, bytes(content),
                                                            working_directory))

    async def read_file(self, path: str, *, working_directory: str = "",
                        max_bytes: int = DEFAULT_TRANSFER_LIMITS.max_bytes_per_file) -> bytes:
        """Reads a regular file; over ``max_bytes`` raises SandboxTransferCapExceeded (refused,
        never truncated)."""
        return await _aio.run(lambda done: self._native.read_file(done, path, working_directory,
                                                                  int(max_bytes)))

    async def stat_file(self, path: str, *, working_directory: str = "") -> Optional[SandboxEntry]:
        raw = await _aio.run(lambda done: self._native.stat_file(done, path, working_directory))
        return None if raw is None else _entry(raw)

    async def list_dir(self, path: str, *, working_directory: str = "") -> tuple:
        raw = await _aio.run(lambda done: self._native.list_dir(done, path, working_directory))
        return tuple(_entry(entry) for entry in raw)

    async def remove(self, path: str, *, working_directory: str = "",
                     recursive: bool = False) -> None:
        await _aio.run(lambda done: self._native.remove(done, path, working_directory,
                                                        bool(recursive)))
