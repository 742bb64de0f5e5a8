"""What :class:`a3m.Socket` does per message, compiled (``a3m/_compiled.py``): the bodies of
``send``, ``recv``'s wait (``take``), ``_recv_now`` and the after-send (``sent``), and the
checks they share with ``a3m.aio``.

Each function takes the socket first; the socket's methods call them (``a3m.aio``'s compiled
calls too, past the method), so a request or a reply runs no interpreted frame of its own
beyond the method's. They read the socket's and the node's own attributes, so both stay plain
Python classes (a user may subclass a socket). ``send`` and ``take`` take the node's lock.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

from a3m.core.link import REASONS
from a3m.core.socket_core import SocketCore
from a3m.errors import LinkRefused, Timeout, UsageError, WouldBlock
from a3m.runtime.node_turn import after_call

_T = TypeVar("_T")


def check_timeout(timeout: float | None) -> None:
    if timeout is not None and timeout < 0:
        raise UsageError("timeout must be >= 0 or None")


def as_bytes(data: Any) -> bytes:
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise UsageError("send takes bytes")
    return bytes(data)


def time_left(timeout: float | None, deadline: float, now: float, sock: Any, what: str,
              sending: bool = False, cookie: bool = False) -> tuple[float, float | None]:
    """For a blocking call about to wait: ``(deadline, seconds left)``, the deadline fixed at
    its first wait (-1.0 before); raises WouldBlock for ``timeout=0``, Timeout once past it.
    Their texts name ``sock`` and the call (``what``) and, for a send (``sending``), why it
    cannot go (``cookie``: it carries one); they are made only then, not at every wait."""
    if timeout is None:
        return deadline, None
    if timeout == 0:
        if sending:
            raise WouldBlock(f"{sock.kind} socket {sock.id.tag!r} cannot send now"
                             f"{sock._why_blocked(cookie)}")
        raise WouldBlock(f"nothing to receive on {sock.id.tag!r}")
    if deadline < 0:
        deadline = now + timeout
    left = deadline - now
    if left <= 0:
        why = sock._why_blocked(cookie) if sending else ""
        raise Timeout(f"{what} on {sock.id.tag!r}{why} timed out")
    return deadline, left


def send(sock: Any, data: Any, timeout: float | None, cookie: Any, waited: bool,
         kw: dict[str, Any]) -> None:
    """:meth:`a3m.Socket.send` (its text says what it does)."""
    if type(data) is not bytes:
        data = as_bytes(data)
    buf = sock._sbuf
    core: SocketCore = sock._core
    if buf.room and not kw and len(data) <= sock._fast_size and (
            timeout is None or timeout >= 0) and (
            cookie is None or core.jar.held + len(buf) < core.jar.limit
            ) and buf.offer(data, cookie):
        return
    if timeout is not None and timeout < 0:
        check_timeout(timeout)
    node = sock.node
    drv = node._driver
    deadline = -1.0  # set on the first wait: a send that goes through reads no clock twice
    with drv.lock:
        while True:
            # (not drv.running, inline: a property is a call per send)
            if sock._closed or node._closed or not drv._running or drv._lingering:
                sock._check_open()  # (it raises)
            now = time.monotonic()
            core.node.now = now
            if len(buf):
                sock._drain(now)  # what was buffered goes first
            if not len(buf) and core.try_send(data, cookie, **kw):
                sent(sock, core, now, waited or deadline >= 0)
                return
            deadline, left = time_left(timeout, deadline, now, sock, "send", True,
                                       cookie is not None)
            refusal = core.fatal_refusal()
            if refusal is not None and not core.links:
                raise LinkRefused(REASONS.get(refusal, hex(refusal)))
            drv.wait(left)


def sent(sock: Any, core: SocketCore, now: float, waited: bool) -> None:
    """Under the node's lock, after the core took a send made at ``now``: the node's
    after-call. A send of a buffered socket that ``waited`` (for credits, a link) counts
    as following the stream's previous one, so it goes on in the cork window: sent at
    once as after a quiet spell, each grant of a credit-bound stream began with a BATCH
    of one call's messages alone (one more datagram and ACK a grant). A step of an
    exchange (``core.exchange``: a request, a reply) is no stream's: handed off at once,
    whenever the previous send was (a round trip shorter than the window held every
    other request, or reply, for the window: a third more to a REQ/REP round trip's p50)."""
    node = sock.node
    if core.exchange:
        after_call(node, -1.0, sock)  # (node._after_call is this, bound: called direct)
        return
    if waited and core.plain_send:
        node._cork.sent_at = now
    after_call(node, now, sock)


def take(sock: Any, fn: Callable[[], _T | None], timeout: float | None, what: str) -> _T:
    """Under the node's lock: ``fn()`` until it gives something (not None), waiting for the
    network in between; then hand credits and the rest to the transport."""
    if timeout is not None and timeout < 0:
        check_timeout(timeout)
    node = sock.node
    drv = node._driver
    core: SocketCore = sock._core
    deadline = -1.0  # set on the first wait: a message already there costs no clock read
    with drv.lock:
        while True:
            now = time.monotonic()
            core.node.now = now
            out = fn()
            if out is not None:
                after_call(node)
                return out
            if sock._closed or node._closed or not drv._running or drv._lingering:
                sock._check_open()  # (it raises)
            if timeout is None:  # (time_left's first case, inline: no call, no text)
                drv.wait(None)
                continue
            deadline, left = time_left(timeout, deadline, now, sock, what)
            drv.wait(left)


def take_exchange(sock: Any, x: Any, timeout: float | None) -> bytes:
    """:meth:`a3m.Socket.recv` of a REQ or REP socket that has a native exchange (``x``, its
    ``a3m._native.XSocket``; ``a3m.runtime.exchange``): under the node's lock, the exchange's
    ``take`` until it gives the payload, waiting for the network in between (a leader's
    reads hand a lent socket its message, and the wait ends without a turn); where it says
    the core must act (False: the socket is not lent, a FLOW is due, a misuse to report),
    the core's receive, through the socket's ``_core``, which takes the socket back."""
    if timeout is not None and timeout < 0:
        check_timeout(timeout)
    node = sock.node
    drv = node._driver
    deadline = -1.0
    with drv.lock:
        while True:
            now = time.monotonic()
            got = x.take()
            if got is False:
                core: SocketCore = sock._core
                core.node.now = now
                got = core.try_recv_payload()
                if got is not None:
                    after_call(node)
            if got is not None:
                out: bytes = got
                return out
            if sock._closed or node._closed or not drv._running or drv._lingering:
                sock._check_open()  # (it raises)
            if timeout is None:
                drv.wait(None)
                continue
            deadline, left = time_left(timeout, deadline, now, sock, "recv")
            drv.wait(left)


def recv_now(sock: Any) -> bytes | None:
    """:meth:`a3m.Socket.recv` with ``timeout=0`` that returns None instead of raising
    WouldBlock (``a3m.aio`` tries this way: a raised exception per wait cost more than the
    rest of the try). Raises Closed as ``recv`` does."""
    inbox = sock._inbox
    if inbox:
        try:
            got: bytes = inbox.popleft()[0]
            return got
        except IndexError:  # another thread took the last one meanwhile
            pass
    node = sock.node
    drv = node._driver
    core: SocketCore = sock._core
    with drv.lock:
        core.node.now = time.monotonic()
        if sock._prefetch:
            ahead = sock._take_ahead()
            out: bytes | None = None if ahead is None else ahead[0]
        else:
            out = core.try_recv_payload()
        if out is not None:
            after_call(node)
            return out
        if sock._closed or node._closed or not drv._running or drv._lingering:
            sock._check_open()  # (it raises)
        return None
