"""``a3m.aio``: the same nodes and sockets for asyncio, with awaitable calls.

Datagrams are still received on the node's I/O thread (the asyncio default loop drops most of a
UDP blast, see ``docs/performance.md``); that thread wakes waiting coroutines through
``loop.call_soon_threadsafe``. A coroutine never blocks the event loop::

    async with a3m.aio.Node("alpha") as alpha:
        push = alpha.socket(a3m.PUSH, "out")
        push.link("beta/in")
        await push.wait_linked(timeout=5)
        await push.send(b"hello")
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from a3m.errors import Timeout, UsageError, WouldBlock
from a3m.runtime import node as _sync
from a3m.runtime.sockets import POLLIN, POLLOUT, ReceivedMessage, SocketId

T = TypeVar("T")

__all__ = ["Node", "Socket", "SocketId", "ReceivedMessage", "POLLIN", "POLLOUT"]


class Node:
    """An A3M node for asyncio code (the arguments of :class:`a3m.Node`)."""

    def __init__(self, node_id: str | None = None, bind: str | tuple[str, int] = "127.0.0.1:0",
                 **options: Any) -> None:
        self.sync = _sync.Node(node_id, bind, **options)
        self.id = self.sync.id
        self._waiters: set[asyncio.Future[None]] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self.sync.add_listener(self._wake_all)

    @property
    def address(self) -> tuple[str, int]:
        return self.sync.address

    def associate(self, node_id: str, address: Any, public_key: str | bytes | None = None
                  ) -> None:
        self.sync.associate(node_id, address, public_key)

    @property
    def public_key(self) -> str | None:
        """This node's long-term public key (``a3m.Node.public_key``)."""
        return self.sync.public_key  # type: ignore[no-any-return]

    def register_socket_type(self, name: str, factory: Callable[..., Any]) -> None:
        self.sync.register_socket_type(name, factory)

    def socket(self, kind: Any, tag: str | None = None, **options: Any) -> Socket:
        return Socket(self, self.sync.socket(kind, tag, **options))

    async def close(self, timeout: float | None = None) -> bool:
        self.sync.remove_listener(self._wake_all)
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(None, self.sync.close, timeout)

    async def __aenter__(self) -> Node:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close(timeout=10)

    # ------------------------------------------------------------------ waking coroutines

    def _wake_all(self) -> None:
        """Called by the node (any thread) after something changed."""
        if not self._waiters or self._loop is None:
            return
        self._loop.call_soon_threadsafe(self._resolve)

    def _resolve(self) -> None:
        waiters, self._waiters = self._waiters, set()
        for fut in waiters:
            if not fut.done():
                fut.set_result(None)

    async def _retry(self, attempt: Callable[[], T], timeout: float | None, what: str) -> T:
        """Call ``attempt`` (which raises WouldBlock when it must wait) until it succeeds.

        Timeouts mean what they mean in the blocking API: ``None`` waits for ever, ``0`` never
        waits (``WouldBlock``, as the attempt raised it), a negative one is a ``UsageError``,
        and one that passes raises ``Timeout("<what> timed out")``."""
        if timeout is not None and timeout < 0:
            raise UsageError("timeout must be >= 0 or None")
        self._loop = asyncio.get_running_loop()
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            fut: asyncio.Future[None] = self._loop.create_future()
            self._waiters.add(fut)  # registered before trying: no wake-up can be missed
            try:
                result = attempt()
            except WouldBlock:
                if timeout == 0:
                    self._waiters.discard(fut)
                    raise
            except BaseException:
                self._waiters.discard(fut)
                raise
            else:
                self._waiters.discard(fut)
                return result
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                self._waiters.discard(fut)
                raise Timeout(f"{what} timed out")
            try:  # the periodic re-check is a safety net; wake-ups normally come first
                await asyncio.wait_for(asyncio.shield(fut), timeout=min(left or 0.5, 0.5))
            except TimeoutError:
                self._waiters.discard(fut)


class Socket:
    """An asyncio socket: awaitable ``send``, ``recv``, ``recv_msg``, ``wait_linked``,
    ``close``; the rest as on :class:`a3m.Socket`."""

    def __init__(self, node: Node, sock: _sync.Socket) -> None:
        self.node = node
        self.sync = sock
        self.id = sock.id
        self.kind = sock.kind

    def link(self, peer: Any) -> None:
        self.sync.link(peer)

    def unlink(self, peer: Any) -> None:
        self.sync.unlink(peer)

    @property
    def links(self) -> list[SocketId]:
        return self.sync.links

    def subscribe(self, topic: bytes | str) -> None:
        self.sync.subscribe(topic)

    def unsubscribe(self, topic: bytes | str) -> None:
        self.sync.unsubscribe(topic)

    def join(self, group: str | bytes) -> None:
        self.sync.join(group)

    def leave(self, group: str | bytes) -> None:
        self.sync.leave(group)

    async def members(self, group: str | bytes, timeout: float | None = 0
                      ) -> list[SocketId]:
        """RADIO: the view of ``group``, waiting up to ``timeout`` for a non-empty one."""
        def attempt() -> list[SocketId]:
            got = self.sync.members(group, timeout=0)
            if not got:
                raise WouldBlock(f"group {group!r} has no members yet")
            return got

        try:
            return await self.node._retry(attempt, timeout, f"members of {group!r}")
        except (WouldBlock, Timeout):
            return []

    def get_option(self, name: str) -> Any:
        return self.sync.get_option(name)

    def set_option(self, name: str, value: Any) -> None:
        self.sync.set_option(name, value)

    async def send(self, data: bytes, timeout: float | None = None, **kw: Any) -> None:
        await self.node._retry(lambda: self.sync.send(data, timeout=0, **kw), timeout,
                               f"send on {self.id.tag!r}")

    async def send_many(self, messages: Iterable[bytes], timeout: float | None = None,
                        **kw: Any) -> int:
        """As :meth:`a3m.Socket.send_many`: how many were sent (all, unless the timeout
        passed after some went); raises when none could be."""
        items = list(messages)
        sent = 0
        deadline = None if timeout is None else time.monotonic() + timeout
        while sent < len(items):
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            rest = items[sent:]
            try:
                sent += await self.node._retry(
                    lambda rest=rest: self.sync.send_many(rest, timeout=0, **kw), left,
                    f"send_many on {self.id.tag!r}")
            except (Timeout, WouldBlock):
                if sent:
                    return sent
                raise
        return sent

    async def recv_many(self, max_items: int, timeout: float | None = None) -> list[bytes]:
        """As :meth:`a3m.Socket.recv_many`."""
        return await self.node._retry(lambda: self.sync.recv_many(max_items, timeout=0),
                                      timeout, f"recv_many on {self.id.tag!r}")

    async def recv_msg(self, timeout: float | None = None) -> ReceivedMessage:
        return await self.node._retry(lambda: self.sync.recv_msg(timeout=0), timeout,
                                      f"recv on {self.id.tag!r}")

    async def recv(self, timeout: float | None = None) -> bytes:
        return (await self.recv_msg(timeout)).payload

    async def wait_linked(self, peer: Any = None, timeout: float | None = None) -> bool:
        def attempt() -> bool:
            if self.sync.wait_linked(peer, timeout=0):
                return True
            core = self.sync._core
            key = None if peer is None else tuple(SocketId.of(peer))
            with self.sync.node._driver.lock:
                if core.fatal_refusal(key) is not None:  # type: ignore[arg-type]
                    return False
            raise WouldBlock("not linked yet")

        try:
            return await self.node._retry(attempt, timeout, "wait_linked")
        except (Timeout, WouldBlock):  # False when the timeout passes, as in the blocking API
            return False

    async def close(self, timeout: float | None = None) -> bool:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(None, self.sync.close, timeout)

    def __repr__(self) -> str:
        return f"<a3m.aio.Socket {self.kind} {self.id.node}/{self.id.tag}>"
