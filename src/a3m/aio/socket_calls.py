"""What an :class:`a3m.aio.Socket` does per message, compiled (``a3m/_compiled.py``): the
coroutines of ``recv`` and ``send``, and the wait between a receive's tries (``until``).

The socket's methods return these coroutines, so a request or a reply runs no interpreted
frame of its own beyond the method's call. Each takes the socket first and reads the socket's
attributes (``sync``, ``node``), so the socket stays a plain Python class; the blocking
socket's compiled calls (:mod:`a3m.runtime.socket_calls`) do the tries.
"""

from __future__ import annotations

import time
from functools import partial
from typing import Any

from a3m.errors import Timeout, WouldBlock
from a3m.runtime import sockets as _sync
from a3m.runtime.socket_calls import check_timeout, recv_now


async def until(drv: Any, sync: Any, timeout: float | None, tag: str) -> bytes:
    """Await changes (``drv.changed``) and try ``recv_now(sync)`` again until it gives a
    message, or raise ``Timeout``. Nothing happens between a try and the wait (one thread):
    no change is missed."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        left = None if deadline is None else deadline - time.monotonic()
        if left is not None and left <= 0:
            raise Timeout(f"recv on {tag!r} timed out")
        await drv.changed(left)
        got = recv_now(sync)
        if got is not None:
            return got


async def recv(sock: Any, timeout: float | None) -> bytes:
    """:meth:`a3m.aio.Socket.recv` (its text says what it does)."""
    sync = sock.sync
    inbox = sync._inbox
    if inbox and timeout is None:
        try:
            got: bytes = inbox.popleft()[0]
            return got
        except IndexError:  # a worker thread took it meanwhile
            pass
    check_timeout(timeout)
    now = recv_now(sync)  # (no WouldBlock raised and caught per wait)
    if now is not None:
        return now
    if timeout == 0:
        raise WouldBlock(f"nothing to receive on {sock.id.tag!r}")
    return await until(sock.node._driver, sync, timeout, sock.id.tag)


async def send(sock: Any, data: Any, timeout: float | None, kw: dict[str, Any]) -> None:
    """:meth:`a3m.aio.Socket.send` (its text says what it does)."""
    check_timeout(timeout)
    sync = sock.sync
    try:
        sync.send(data, 0, **kw)
        return
    except WouldBlock:
        if timeout == 0:
            raise
    # A try after a wait says so (``_waited``): the send goes on in the cork window as
    # one that blocked does (``socket_calls.sent``). The Python send takes the keyword
    # (``sync.send`` may be the native one, which takes none: it is the try above).
    await sock.node._retry(partial(_sync.Socket.send, sync, data, 0, _waited=True, **kw),
                           timeout, f"send on {sock.id.tag!r}", sock._refused)
