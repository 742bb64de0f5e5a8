"""``a3m.aio``: the same nodes and sockets for asyncio, with awaitable calls.

The node runs in the event loop (``a3m.aio.driver``): its UDP socket is read from the loop's
reader callback in bursts, its timer is a loop timer, and the cores are called in the loop's
thread; no I/O thread and no hand-off between threads. Everything above the I/O is the
blocking runtime's code (``a3m.aio.node``). A coroutine never blocks the event loop::

    async with a3m.aio.Node("alpha") as alpha:
        push = alpha.socket(a3m.PUSH, "out")
        push.link("beta/in")
        await push.wait_linked(timeout=5)
        await push.send(b"hello")

Create nodes in a coroutine (the running loop drives them). Any loop that supports
``add_reader`` works: the application's choice of uvloop (``pip install a3m[uvloop]``,
``uvloop.run(main())``) is used as it is.

Timeouts and errors mean what they mean in the blocking API (``None`` waits for ever, ``0``
never waits and raises ``WouldBlock``, a passed timeout raises ``Timeout``). Cancellation is
safe: a cancelled ``recv`` (``recv_msg``, ``recv_many``) took nothing, the message stays for
the next one; a cancelled ``send`` did not send its message (a send that went returns, it is
never cancelled half-way); a cancelled ``send_many`` sent the first ``exc.sent`` messages of
its list (the ``CancelledError`` carries the count). So waiting on several sockets is
``asyncio.wait`` over their receives, cancelling the ones that did not finish.

A call that can complete at once (a message waiting, a credit free) returns without yielding
to the loop, as ``asyncio.Queue.get`` does: a coroutine that calls one in a loop without
ever waiting should ``await asyncio.sleep(0)`` now and then, or it holds the loop.

The blocking calls of the same node stay usable from worker threads (``sock.sync.recv`` in
``asyncio.to_thread``); on the loop's thread they raise ``UsageError`` rather than stall it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Coroutine, Iterable
from functools import partial
from typing import Any, TypeVar

from a3m.aio import socket_calls as _calls
from a3m.aio.driver import LoopDriver
from a3m.aio.node import LoopNode
from a3m.core.cookies import Cookie
from a3m.core.link import REASONS
from a3m.errors import LinkRefused, Timeout, UsageError, WouldBlock
from a3m.ids import SocketId
from a3m.runtime import sockets as _sync
from a3m.runtime.events import NodeEvent
from a3m.runtime.socket_calls import check_timeout as _check_timeout
from a3m.runtime.sockets import POLLCOOKIE, POLLIN, POLLOUT, ReceivedMessage

T = TypeVar("T")

__all__ = ["Node", "Socket", "SocketId", "ReceivedMessage", "Cookie", "NodeEvent", "POLLIN",
           "POLLOUT", "POLLCOOKIE"]


class Node:
    """An A3M node for asyncio code (the arguments of :class:`a3m.Node`), created in a
    coroutine: the running event loop drives it."""

    def __init__(self, node_id: str | None = None, bind: str | tuple[str, int] = "127.0.0.1:0",
                 **options: Any) -> None:
        #: The node itself (:class:`a3m.Node`'s code on the loop's driver).
        self.sync = LoopNode(node_id, bind, **options)
        self.id = self.sync.id
        self._driver: LoopDriver = self.sync._driver

    @property
    def address(self) -> tuple[str, int]:
        return self.sync.address

    def associate(self, node_id: str, address: Any, public_key: str | bytes | None = None
                  ) -> None:
        self.sync.associate(node_id, address, public_key)

    @property
    def public_key(self) -> str | None:
        """This node's long-term public key (``a3m.Node.public_key``)."""
        return self.sync.public_key

    def rebind(self, bind: str | tuple[str, int]) -> None:
        self.sync.rebind(bind)

    def register_socket_type(self, name: str, factory: Callable[..., Any]) -> None:
        self.sync.register_socket_type(name, factory)

    def socket(self, kind: Any, tag: str | None = None, **options: Any) -> Socket:
        return Socket(self, self.sync.socket(kind, tag, **options))

    @property
    def stats(self) -> dict[str, Any]:
        return self.sync.stats

    def unreachable_peers(self) -> list[str]:
        return self.sync.unreachable_peers()

    async def events(self, timeout: float | None = None) -> AsyncIterator[NodeEvent]:
        """As :meth:`a3m.Node.events`, for ``async for``: each next event is awaited; the
        iteration ends when ``timeout`` seconds pass without one (``0``: what is there), or
        once the node closed and every event was read."""
        _check_timeout(timeout)
        node, drv = self.sync, self._driver
        queue = node._events
        while True:
            with drv.lock:
                ev = queue.pop()
            if ev is None:
                if node._closed or not drv.running or timeout == 0:
                    return
                deadline = None if timeout is None else time.monotonic() + timeout
                await drv.until(lambda: bool(queue.items) or node._closed or not drv.running,
                                deadline)
                with drv.lock:
                    ev = queue.pop()
                if ev is None:
                    return
            yield ev

    async def flush(self, timeout: float | None = None) -> bool:
        """As :meth:`a3m.Node.flush`: until every message sent so far is acknowledged."""
        return await self.sync.aflush(timeout)

    async def close(self, timeout: float | None = None) -> bool:
        """As :meth:`a3m.Node.close` (the linger after it runs in the background)."""
        return await self.sync.aclose(timeout)

    async def __aenter__(self) -> Node:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close(timeout=10)

    def __repr__(self) -> str:
        return f"<a3m.aio.Node {self.id!r}>"

    async def _retry(self, attempt: Callable[[], T], timeout: float | None, what: str,
                     refused: Callable[[], None] | None = None) -> T:
        """After a first ``attempt`` raised WouldBlock (and ``timeout`` is not 0): await
        changes and try again until it succeeds, or raise ``Timeout("<what> timed out")``.
        Nothing happens between a try and the wait (one thread): no change is missed."""
        drv = self._driver
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise Timeout(f"{what} timed out")
            if refused is not None:
                refused()
            await drv.changed(left)
            try:
                return attempt()
            except WouldBlock:
                pass


class Socket:
    """An asyncio socket: awaitable ``send``, ``send_many``, ``recv``, ``recv_msg``,
    ``recv_many``, ``members``, ``wait_linked``, ``close``; the rest as on
    :class:`a3m.Socket` (``sync`` is that socket)."""

    def __init__(self, node: Node, sock: _sync.Socket) -> None:
        self.node = node
        self.sync = sock
        self.id = sock.id
        self.kind = sock.kind

    def link(self, peer: Any) -> None:
        self.sync.link(peer)

    def unlink(self, peer: Any) -> None:
        self.sync.unlink(peer)

    def refusal(self, peer: Any) -> str | None:
        return self.sync.refusal(peer)

    @property
    def links(self) -> list[SocketId]:
        return self.sync.links

    @property
    def readable(self) -> bool:
        return self.sync.readable

    @property
    def writable(self) -> bool:
        return self.sync.writable

    def subscribe(self, topic: bytes | str) -> None:
        self.sync.subscribe(topic)

    def unsubscribe(self, topic: bytes | str) -> None:
        self.sync.unsubscribe(topic)

    def join(self, group: str | bytes) -> None:
        self.sync.join(group)

    def leave(self, group: str | bytes) -> None:
        self.sync.leave(group)

    def get_option(self, name: str) -> Any:
        return self.sync.get_option(name)

    def set_option(self, name: str, value: Any) -> None:
        self.sync.set_option(name, value)

    # ------------------------------------------------------------------ messages

    def _refused(self) -> None:
        """A send that waits: LinkRefused when its socket has no link and a fatal refusal,
        as the blocking send raises."""
        core = self.sync._core
        refusal = core.fatal_refusal()
        if refusal is not None and not core.links:
            raise LinkRefused(REASONS.get(refusal, hex(refusal)))

    def send(self, data: bytes, timeout: float | None = None, **kw: Any
             ) -> Coroutine[Any, Any, None]:
        """As :meth:`a3m.Socket.send` (a coroutine: ``await sock.send(data)``). Cancelled
        while it waits, it sent nothing."""
        return _calls.send(self, data, timeout, kw)

    async def send_many(self, messages: Iterable[bytes], timeout: float | None = None,
                        cookies: Iterable[Any] | None = None, **kw: Any) -> int:
        """As :meth:`a3m.Socket.send_many`: how many were sent (all, unless the timeout
        passed after some went); raises when none could be. Cancelled, it raises
        ``CancelledError`` with ``sent``: how many of the list went."""
        _check_timeout(timeout)
        items = messages if type(messages) is list else list(messages)
        marks = None if cookies is None else list(cookies)
        if marks is not None:
            if len(marks) != len(items):
                raise UsageError("send_many: one cookie per message (None for none)")
            kw["cookies"] = marks
        sync = self.sync
        sent = 0
        deadline = None if timeout is None else time.monotonic() + timeout
        try:
            while sent < len(items):
                rest = items[sent:] if sent else items
                if marks is not None:
                    kw["cookies"] = marks[sent:]
                try:
                    sent += sync.send_many(rest, 0, **kw)
                    continue
                except WouldBlock:
                    if timeout == 0 and not sent:
                        raise
                    if timeout == 0:
                        return sent
                left = None if deadline is None else max(0.0, deadline - time.monotonic())
                rest = items[sent:]
                if marks is not None:
                    kw["cookies"] = marks[sent:]
                try:
                    sent += await self.node._retry(
                        partial(sync.send_many, rest, 0, _waited=True, **kw), left,
                        f"send_many on {self.id.tag!r}", self._refused)
                except (Timeout, WouldBlock):
                    if sent:
                        return sent
                    raise
        except asyncio.CancelledError as exc:
            exc.sent = sent  # type: ignore[attr-defined]
            raise
        return sent

    def recv(self, timeout: float | None = None) -> Coroutine[Any, Any, bytes]:
        """As :meth:`a3m.Socket.recv` (a coroutine: ``await sock.recv()``). Cancelled while
        it waits, it took nothing."""
        return _calls.recv(self, timeout)

    async def recv_cookie(self, timeout: float | None = None) -> Cookie:
        """As :meth:`a3m.Socket.recv_cookie`: the next outcome of a message sent with a
        cookie. Cancelled while it waits, it took nothing."""
        _check_timeout(timeout)
        sync = self.sync
        try:
            return sync.recv_cookie(0)
        except WouldBlock:
            if timeout == 0:
                raise
        return await self.node._retry(lambda: sync.recv_cookie(0), timeout,
                                      f"recv_cookie on {self.id.tag!r}")

    def cookies(self, max_items: int = 1000) -> list[Cookie]:
        """As :meth:`a3m.Socket.cookies`: the outcomes ready now (maybe [])."""
        return self.sync.cookies(max_items)

    async def recv_msg(self, timeout: float | None = None) -> ReceivedMessage:
        """As :meth:`a3m.Socket.recv_msg`."""
        _check_timeout(timeout)
        sync = self.sync
        try:
            return sync.recv_msg(0)
        except WouldBlock:
            if timeout == 0:
                raise
        return await self.node._retry(lambda: sync.recv_msg(0), timeout,
                                      f"recv on {self.id.tag!r}")

    async def recv_many(self, max_items: int, timeout: float | None = None) -> list[bytes]:
        """As :meth:`a3m.Socket.recv_many`."""
        _check_timeout(timeout)
        sync = self.sync
        try:
            return sync.recv_many(max_items, 0)
        except WouldBlock:
            if timeout == 0:
                raise
        return await self.node._retry(lambda: sync.recv_many(max_items, 0), timeout,
                                      f"recv_many on {self.id.tag!r}")

    async def members(self, group: str | bytes, timeout: float | None = 0
                      ) -> list[SocketId]:
        """RADIO: the view of ``group``, waiting up to ``timeout`` for a non-empty one."""
        _check_timeout(timeout)

        def attempt() -> list[SocketId]:
            got = self.sync.members(group, timeout=0)
            if not got:
                raise WouldBlock(f"group {group!r} has no members yet")
            return got

        try:
            return attempt()
        except WouldBlock:
            if timeout == 0:
                return []
        try:
            return await self.node._retry(attempt, timeout, f"members of {group!r}")
        except Timeout:
            return []

    async def wait_linked(self, peer: Any = None, timeout: float | None = None) -> bool:
        """True once linked (to ``peer``, or to anyone); False on timeout or fatal refusal."""
        _check_timeout(timeout)
        sync = self.sync
        key = None if peer is None else tuple(SocketId.of(peer))

        def attempt() -> bool:
            if sync.wait_linked(peer, timeout=0):
                return True
            with sync.node._driver.lock:
                if sync._core.fatal_refusal(key) is not None:  # type: ignore[arg-type]
                    return False
            raise WouldBlock("not linked yet")

        try:
            return attempt()
        except WouldBlock:
            if timeout == 0:
                return False
        try:
            return await self.node._retry(attempt, timeout, "wait_linked")
        except Timeout:  # False when the timeout passes, as in the blocking API
            return False

    async def close(self, timeout: float | None = None) -> bool:
        """As :meth:`a3m.Socket.close`: unlink cleanly (what is in flight is delivered)."""
        return await self.node.sync.close_socket(self.sync, timeout)

    def __repr__(self) -> str:
        return f"<a3m.aio.Socket {self.kind} {self.id.node}/{self.id.tag}>"
