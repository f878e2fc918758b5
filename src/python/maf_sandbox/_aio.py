"""asyncio over the core's event loop.

Every coroutine of this package starts one C++ Task on the loop thread the native module owns and
awaits an asyncio Future that the loop thread settles through ``loop.call_soon_threadsafe``.

Cancellation goes both ways:

* cancelling the awaiting asyncio task emits a terminal Asio cancellation into the C++ Task, then
  waits for that Task to end (its cleanup included: an exec's process tree killed, a half-made
  sandbox removed) before CancelledError propagates; a second cancel does not cut that wait short;
* a C++ Task that ends because it was cancelled there surfaces as asyncio.CancelledError.
"""

from __future__ import annotations

import asyncio
import functools
from typing import Any, Callable

from . import _native


def _settle(future: asyncio.Future, kind: int, value: Any) -> None:
    if future.done():
        return
    if kind == _native.RESULT:
        future.set_result(value)
    elif kind == _native.ERROR:
        future.set_exception(value)
    else:
        future.cancel(value)


def _deliver(loop: asyncio.AbstractEventLoop, future: asyncio.Future, kind: int, value: Any) -> None:
    # Runs on the native loop thread, with the GIL.
    try:
        loop.call_soon_threadsafe(_settle, future, kind, value)
    except RuntimeError:
        # The asyncio loop closed before the C++ Task ended: nobody is waiting any more.
        pass


async def run(start: Callable[[Callable[[int, Any], None]], Any]) -> Any:
    """Starts a native operation (``start(done)`` returns its Operation) and awaits its end."""
    loop = asyncio.get_running_loop()
    future = loop.create_future()
    operation = start(functools.partial(_deliver, loop, future))
    try:
        return await asyncio.shield(future)
    except asyncio.CancelledError:
        if future.cancelled():
            raise  # the C++ Task was cancelled on its side
        operation.cancel()
        await _ended(future)
        raise


async def _ended(future: asyncio.Future) -> None:
    """Waits until the cancelled C++ Task reports its end, whatever it reports."""
    while not future.done():
        try:
            await asyncio.shield(future)
        except asyncio.CancelledError:
            continue
        except BaseException:  # its own failure: the caller was cancelled, that is what it sees
            break
    if future.done() and not future.cancelled():
        future.exception()  # retrieved, so asyncio does not log it as never retrieved
