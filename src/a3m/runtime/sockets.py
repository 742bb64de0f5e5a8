"""The sockets of an ``a3m.Node`` (blocking, thread-safe) and ``Poller``.

A socket calls into its node's core under the node's lock (the driver's). In a stream it keeps
its own send buffer and inbox, so that most sends and receives take only a small lock of its
own (docs/design.md, "Runtimes"); the node's I/O turn drains the buffers
(:func:`~a3m.runtime.node_turn.take_buffers`).
"""

from __future__ import annotations

import math
import select
import time
import weakref
from bisect import bisect_left
from collections import deque
from collections.abc import Callable, Generator, Iterable
from dataclasses import dataclass
from itertools import repeat
from operator import itemgetter
from typing import TYPE_CHECKING, Any, Protocol

from a3m._dataplane import native
from a3m.core import message as m
from a3m.core.cookies import Cookie
from a3m.core.link import REASONS
from a3m.core.socket_core import SocketCore
from a3m.errors import Closed, LinkRefused, Timeout, UsageError, WouldBlock
from a3m.ids import SocketId
from a3m.runtime import socket_calls as _calls
from a3m.runtime.cork import Cork
from a3m.runtime.ready_fd import ReadyPipe
from a3m.runtime.send_buffer import SendBuffer, new_send_buffer
from a3m.runtime.socket_calls import as_bytes as _as_bytes
from a3m.runtime.socket_calls import check_timeout as _check_timeout
from a3m.runtime.socket_calls import time_left as _time_left

if TYPE_CHECKING:
    from a3m.core.node_core import NodeCore
    from a3m.runtime.driver import Driver


class Owner(Protocol):
    """What a socket needs of its node (:class:`a3m.Node`), which creates it."""

    id: str
    _closed: bool
    _driver: Driver
    _core: NodeCore
    _buffering: set[Socket]  # open send buffers: the node's turn drains them
    _stalled: set[Socket]  # buffers holding sends no link takes now: retried every turn
    _reading_ahead: set[Socket]  # inboxes holding messages sent with a cookie
    _cork: Cork  # the node's cork window (a stream's sends wait for its end)

    def _after_call(self, now: float = -1.0, sock: Socket | None = None) -> None: ...
    def _watch_ready(self, sock: Socket, pipe: ReadyPipe | None) -> None: ...
    def _check_open(self) -> None: ...
    def _forget_socket(self, tag: str) -> None: ...

POLLIN = 1
POLLOUT = 2
POLLCOOKIE = 4  # outcomes of messages sent with a cookie are ready (recv_cookie)
_first = itemgetter(0)

#: Most sends a socket's buffer takes between two turns of the I/O thread.
SEND_BUFFER = 1024
#: Most messages a receive takes ahead into the socket's inbox (see :meth:`Socket.recv`).
PREFETCH = 256


@dataclass(slots=True)
class ReceivedMessage:
    """What ``recv_msg`` returns (treat as immutable; not frozen: that costs per message)."""

    payload: bytes
    source: SocketId
    topic: bytes | None = None
    #: DISH: the group the message was sent to.
    group: str | None = None


#: A call that waits, as steps (``Socket.close``): each step yields a condition, the runtime
#: waits (under the node's lock) until it holds or the call's deadline passes and sends back
#: whether it held; the generator returns the call's result. One text for the blocking and
#: the asyncio runtimes: :func:`run_steps` here, ``a3m.aio`` awaits them.
Steps = Generator[Callable[[], bool], bool, bool]


def run_steps(steps: Steps, wait: Callable[[Callable[[], bool]], bool]) -> bool:
    """Run ``steps`` with ``wait(condition) -> held`` (the driver's ``wait_until``)."""
    try:
        done = next(steps)
        while True:
            done = steps.send(wait(done))
    except StopIteration as stop:
        return bool(stop.value)


def _deadline(timeout: float | None) -> float | None:
    _check_timeout(timeout)
    return None if timeout is None else time.monotonic() + timeout


class Socket:
    """A socket of a node (blocking, thread-safe). Create with :meth:`Node.socket`."""

    def __init__(self, node: Owner, core: SocketCore) -> None:
        self.node = node
        self._core = core
        self.id = SocketId(node.id, core.tag)
        self.kind = core.kind
        self._closed = False
        #: The send buffer (see :meth:`send`): sends that wait for the I/O thread's turn
        #: without having taken the node's lock, under their own small lock.
        self._sbuf: SendBuffer[bytes] = new_send_buffer()
        self._fast_size = node._core.max_message_size - m.DATA_OVERHEAD_MAX
        fast = getattr(native, "FastSend", None)
        if (fast is not None and core.plain_send and not core.send_keywords
                and type(self).send is Socket.send):
            #: A stream's send in one native call (``a3m._native.FastSend``): a plain
            #: message while the buffer has room goes there without a Python frame; any
            #: other send runs :meth:`send` below (the socket held weakly: no cycle). Its
            #: pattern takes no keyword, and neither does the native send (a keyword it does
            #: not know is a TypeError naming it, as the Python send's).
            self.send = fast(  # type: ignore[method-assign]
                self._sbuf, self._fast_size, Socket.send, weakref.ref(self)).send
        #: Messages taken ahead from the core with their source (see :meth:`recv`).
        self._inbox: deque[tuple[bytes, tuple[str, str]]] = deque()
        self._prefetch = core.plain_recv
        fast = getattr(native, "FastRecv", None)
        if fast is not None and self._prefetch and type(self).recv is Socket.recv:
            #: ``recv`` in one native call while the inbox holds messages (its first lines
            #: below, natively); otherwise :meth:`recv` (the socket held weakly).
            self.recv = fast(  # type: ignore[method-assign]
                self._inbox, Socket.recv, weakref.ref(self)).recv
        if fast is not None and self._prefetch and type(self).recv_many is Socket.recv_many:
            #: ``recv_many`` in one native call while the inbox holds messages (its first
            #: lines below); otherwise :meth:`recv_many`.
            self.recv_many = fast(  # type: ignore[method-assign]
                self._inbox, Socket.recv_many, weakref.ref(self)).recv_many
        #: Messages ever put in the inbox, and the flagged ones (sent with a cookie) among
        #: them, by that count: the application took one once fewer remain than its count.
        self._put = 0
        self._flags: list[tuple[int, Any, int]] = []
        self._flags_done = 0  # those before it were reported
        #: The descriptor :meth:`fileno` gives (made at its first call).
        self._ready_pipe: ReadyPipe | None = None

    # ------------------------------------------------------------------ links

    def link(self, peer: Any) -> None:
        """Link with a peer socket (``SocketId``, ``(node, tag)`` or ``"node/tag"``)."""
        pid = SocketId.of(peer)
        with self.node._driver.lock:
            self._check_open()
            self._core.link((pid.node, pid.tag), time.monotonic())
            self.node._after_call()

    def unlink(self, peer: Any) -> None:
        """Unlink from a peer; messages in flight either way are still delivered."""
        pid = SocketId.of(peer)
        with self.node._driver.lock:
            self._core.unlink((pid.node, pid.tag), time.monotonic())
            self.node._after_call()

    def wait_linked(self, peer: Any = None, timeout: float | None = None) -> bool:
        """True once linked (to ``peer``, or to anyone); False on timeout or fatal refusal."""
        pid = None if peer is None else SocketId.of(peer)
        key = None if pid is None else (pid.node, pid.tag)
        deadline = _deadline(timeout)
        drv = self.node._driver
        core = self._core
        with drv.lock:
            drv.wait_until(lambda: (core.is_linked(key) or core.fatal_refusal(key) is not None
                                    or not drv.running), deadline, step=0.1)
            return core.is_linked(key)

    def refusal(self, peer: Any) -> str | None:
        """Why the last attempt to link with ``peer`` was refused, if it was."""
        pid = SocketId.of(peer)
        with self.node._driver.lock:
            code = self._core.refusals.get((pid.node, pid.tag))
        return None if code is None else REASONS.get(code, hex(code))

    @property
    def links(self) -> list[SocketId]:
        """The peers this socket is linked with (established links)."""
        with self.node._driver.lock:
            return [SocketId(*lk.peer) for lk in self._core.established_links()]

    # ------------------------------------------------------------------ messages

    def send(self, data: bytes, timeout: float | None = None, cookie: Any = None, *,
             _waited: bool = False, **kw: Any) -> None:
        """Send a message; blocks while no link can take it (no link, no credits).

        ``timeout=0`` never blocks (raises :class:`~a3m.errors.WouldBlock`). ``cookie``: any
        object; what became of the message comes back with it, once per peer it went to
        (:meth:`recv_cookie`); a send with a cookie also waits while ``max_cookies``
        outcomes are unread.

        In a stream (a send within ``cork_s`` of the previous one) on a socket with the
        default send hooks (PUSH, PAIR, DEALER...), sends wait in the socket's buffer for
        the I/O thread's next turn, at most ``cork_s`` later, without taking the node's
        lock: as many as the links' credits took when the buffer opened, so a send still
        returns only once a link holds a credit for it, and they leave in order. A send that
        had to wait (for credits, a link) counts as part of its stream, and so does one with
        ``_waited`` (internal: ``a3m.aio``'s ``timeout=0`` try after it awaited)."""
        _calls.send(self, data, timeout, cookie, _waited, kw)

    def send_many(self, messages: Iterable[bytes], timeout: float | None = None,
                  cookies: Iterable[Any] | None = None, *, _waited: bool = False,
                  **kw: Any) -> int:
        """Send ``messages`` in order, exactly once each, as a loop of :meth:`send` would, but
        taking the node's lock and handing work to the transport once per batch the links
        accept instead of once per message.

        Returns how many were sent: all of them, unless ``timeout`` passed after some went
        (the rest were not sent; send them again). Raises as :meth:`send` does when none
        could be sent (``WouldBlock`` for ``timeout=0``, ``Timeout``). ``cookies``: one per
        message (None where a message has none), as :meth:`send`'s ``cookie``; ``_waited``
        as :meth:`send`'s."""
        items = messages if type(messages) is list else list(messages)
        marks = None if cookies is None else list(cookies)
        if marks is not None and len(marks) != len(items):
            raise UsageError("send_many: one cookie per message (None for none)")
        buf = self._sbuf
        n = len(items)
        if (buf.room >= n > 0 and not kw and (timeout is None or timeout >= 0) and (
                    marks is None
                    or self._core.jar.held + len(buf) + n <= self._core.jar.limit)
                and buf.offer_many(items, marks, self._fast_size)):
            return n  # (the buffer is open: see send; it checked types and sizes, one pass)
        if set(map(type, items)) != {bytes}:  # (in C: most batches are bytes already)
            items = [m if type(m) is bytes else _as_bytes(m) for m in items]
        _check_timeout(timeout)
        drv = self.node._driver
        core = self._core
        sent = 0
        deadline = -1.0
        with drv.lock:
            while sent < n:
                self._check_open()
                now = time.monotonic()
                core.node.now = now
                if len(buf):
                    self._drain(now)  # what was buffered goes first
                went = 0 if len(buf) else core.try_send_many(
                    items[sent:] if sent else items,
                    None if marks is None else marks[sent:], **kw)
                if went:
                    sent += went
                    _calls.sent(self, core, now, _waited or deadline >= 0)
                    continue  # acknowledgements may have come in meanwhile: try again
                try:
                    deadline, left = _time_left(timeout, deadline, now, self, "send_many",
                                                True, marks is not None)
                except (WouldBlock, Timeout):
                    if sent:
                        return sent
                    raise
                refusal = core.fatal_refusal()
                if refusal is not None and not core.links:
                    raise LinkRefused(REASONS.get(refusal, hex(refusal)))
                drv.wait(left)
        return sent

    def recv_many(self, max_items: int, timeout: float | None = None) -> list[bytes]:
        """Up to ``max_items`` payloads, in order, exactly once: waits (as :meth:`recv`)
        for the first, then takes what is already there, under one lock and with one credit
        hand-off for the lot. Raises as :meth:`recv` when nothing came in time."""
        if not isinstance(max_items, int) or max_items < 1:
            raise UsageError("recv_many needs max_items >= 1")
        if self._inbox:
            taken = self._from_inbox(max_items)
            if taken:
                return [payload for payload, _ in taken]
        core = self._core
        return _calls.take(self, lambda: core.try_recv_many(max_items) or None, timeout,
                           "recv_many")

    def recv_msg(self, timeout: float | None = None) -> ReceivedMessage:
        """The next message with its source (and topic, for SUB)."""
        if self._prefetch:
            inbox = self._inbox
            try:
                payload, source = inbox.popleft() if inbox else _calls.take(
                    self, self._take_ahead, timeout, "recv")
            except IndexError:  # another thread took the last one meanwhile
                payload, source = _calls.take(self, self._take_ahead, timeout, "recv")
            return ReceivedMessage(payload, SocketId(*source))
        got = _calls.take(self, self._core.try_recv, timeout, "recv")
        attrs = got.attrs
        return ReceivedMessage(got.payload, SocketId(*got.source), got.topic,
                               None if attrs is None else attrs.get("group"))

    def recv(self, timeout: float | None = None) -> bytes:
        """The next message's payload.

        Where the default receive hooks are in force (PULL, PAIR, DEALER...), a receive
        that takes the node's lock also takes up to :data:`PREFETCH` messages already there
        into the socket's inbox, in order; the next receives take them from there without
        the lock. Their credits go back to the senders when they are taken."""
        inbox = self._inbox
        if inbox:
            try:
                return inbox.popleft()[0]
            except IndexError:  # another thread took the last one meanwhile
                pass
        if self._prefetch:
            return _calls.take(self, self._take_ahead, timeout, "recv")[0]
        return _calls.take(self, self._core.try_recv_payload, timeout, "recv")

    def _recv_now(self) -> bytes | None:
        """:meth:`recv` with ``timeout=0`` that returns None instead of raising WouldBlock
        (``a3m.aio`` tries this way: a raised exception per wait cost more than the rest of
        the try). Raises Closed as :meth:`recv` does."""
        return _calls.recv_now(self)

    def _take_ahead(self) -> tuple[bytes, tuple[str, str]] | None:
        """Under the node's lock: the next message with its source, and what else is there
        (up to :data:`PREFETCH` in all) into the inbox behind what it holds already."""
        inbox = self._inbox
        if self._flags:
            self._report()
        if not inbox:
            core = self._core
            core.ahead_base = self._put  # (the inbox is empty: every count below was taken)
            for peer, _, payloads in core.try_recv_runs(PREFETCH, True):
                inbox.extend(zip(payloads, repeat(peer)))
                self._put += len(payloads)
            if core.ahead_flags:  # flagged messages wait to be reported when taken
                self._flags += core.ahead_flags
                core.ahead_flags.clear()
                self.node._reading_ahead.add(self)  # (the node's turns look too)
        try:
            return inbox.popleft()
        except IndexError:
            return None

    def _report(self) -> bool:
        """Under the node's lock: report the flagged messages the application took from the
        inbox since; True while some still wait there."""
        flags = self._flags
        done = self._flags_done
        taken = self._put - len(self._inbox)  # (pops only lower the length: never early)
        upto = bisect_left(flags, taken, lo=done, key=_first)
        if upto > done:
            self._core.taken_ahead_many(flags, done, upto)
            done = upto
        if done == len(flags):
            flags.clear()
            done = 0
            self.node._reading_ahead.discard(self)
        elif done > 4096:
            del flags[:done]
            done = 0
        self._flags_done = done
        return bool(flags)

    def _from_inbox(self, max_items: int) -> list[tuple[bytes, tuple[str, str]]]:
        """Up to ``max_items`` messages from the inbox, in order (threads may share it)."""
        inbox = self._inbox
        out = []
        try:
            for _ in range(max_items):
                out.append(inbox.popleft())
        except IndexError:
            pass
        return out

    def _recv_runs(self, max_items: int, timeout: float | None
                   ) -> list[tuple[tuple[str, str], bytes | None, list[bytes]]]:
        """As :meth:`recv_many`, with each message's source and topic, by runs of one link's
        messages: ``(source, topic, payloads)`` (for the Spark collector's spool)."""
        if self._inbox:
            runs: list[tuple[tuple[str, str], bytes | None, list[bytes]]] = []
            for payload, source in self._from_inbox(max_items):
                if runs and runs[-1][0] == source:
                    runs[-1][2].append(payload)
                else:
                    runs.append((source, None, [payload]))
            if runs:
                return runs
        core = self._core
        return _calls.take(self, lambda: core.try_recv_runs(max_items) or None, timeout,
                           "recv_many")

    def subscribe(self, topic: bytes | str) -> None:
        """SUB: receive messages whose topic starts with ``topic`` (b"" = everything)."""
        self._pattern_call("subscribe", topic)

    def unsubscribe(self, topic: bytes | str) -> None:
        self._pattern_call("unsubscribe", topic)

    def join(self, group: str | bytes) -> None:
        """DISH: receive what RADIOs send to ``group``."""
        self._pattern_call("join", group)

    def leave(self, group: str | bytes) -> None:
        """DISH: stop being a member of ``group`` (what was already sent to it still comes)."""
        self._pattern_call("leave", group)

    def members(self, group: str | bytes, timeout: float | None = 0) -> list[SocketId]:
        """RADIO: the DISH sockets a send to ``group`` reaches now (the view), waiting up to
        ``timeout`` seconds (None: for ever) for it to be non-empty."""
        method = getattr(self._core, "members", None)
        if method is None:
            raise UsageError(f"a {self.kind} socket has no members()")
        deadline = _deadline(timeout)
        drv = self.node._driver
        got: list[tuple[str, str]] = []

        def found() -> bool:
            nonlocal got
            self._check_open()
            got = method(group)
            return bool(got)

        with drv.lock:
            drv.wait_until(found, deadline)
            return [SocketId(*peer) for peer in got]

    def _open_buffer(self, due: float, room: int | None = None) -> None:
        """Under the node's lock: let the next sends wait in the buffer, as many as the
        links' credits take now (``room``, at most :data:`SEND_BUFFER`), for a turn by
        ``due``."""
        if room is None:
            room = self._core.send_room()
        if not self._sbuf.open(min(room, SEND_BUFFER)):
            return
        node = self.node
        node._buffering.add(self)
        node._driver.wake_by(due)

    def _close_buffer(self) -> None:
        """Under the node's lock: every send takes the node's lock again (once what the
        buffer holds has gone: a send may have come since it was last drained)."""
        # A stalled buffer leaves the open ones too: the node retries it on every turn, and
        # the cork deadline of an open buffer would make the I/O thread spin meanwhile.
        if self._sbuf.shut() or self._sbuf.stalled:
            self.node._buffering.discard(self)

    def _drain(self, now: float) -> bool:
        """Under the node's lock: hand the buffered sends to the core, in order (True when
        some went; :meth:`SendBuffer.drain`). What no link can take now (one went away)
        stays first in line: the node retries the socket on every turn."""
        self._core.node.now = now
        buf = self._sbuf
        moved = buf.drain(self._hand_on)
        if buf.stalled and buf.marks is not None and not self._core.established_links():
            # No link left to take them (the peer closed or unlinked while they waited for
            # the turn): sends with a cookie are not held for a link that may never come;
            # they never left, and say so (NOT_DELIVERED), as the core's would whose link
            # ended first. Those without one wait for a link (issue 40).
            for cookie in buf.give_up_marked():
                self._core.jar.unsent(cookie)
                moved = True
            buf.stalled = bool(len(buf))
        if buf.stalled:
            self.node._stalled.add(self)
        else:
            self.node._stalled.discard(self)
        return moved

    def _drop_flagged(self) -> None:
        """Under the node's lock, at close: flagged messages still in the inbox leave it,
        reported NOT_DELIVERED (the rest stays readable)."""
        if not self._flags or not self._report():
            return
        inbox = self._inbox
        first = self._put - len(inbox)
        left = self._flags[self._flags_done:]
        gone = {at - first for at, _, _ in left}
        kept = [x for i, x in enumerate(inbox) if i not in gone]
        inbox.clear()
        inbox.extend(kept)
        self._put = first + len(kept)
        self._core.taken_ahead_many(left, 0, len(left), taken=False)
        self._flags.clear()
        self._flags_done = 0
        self.node._reading_ahead.discard(self)

    def _hand_on(self, items: list[bytes], cookies: list[Any] | None) -> int:
        """The buffered sends to the core, with their cookies: how many it took (each was
        checked against the largest message as it was offered)."""
        return self._core.try_send_sized(items, cookies)

    def _why_blocked(self, cookie: bool = False) -> str:
        why = self._core.blocked_reason()
        if cookie and self._core.jar.full:
            why = (f"{self._core.jar.limit} outcomes of cookies unread (max_cookies): "
                   "take them with recv_cookie() or cookies()")
        return f" ({why})" if why else ""

    # ------------------------------------------------------------------ cookies

    def recv_cookie(self, timeout: float | None = None) -> Cookie:
        """The next outcome of a message sent with a cookie (waits as :meth:`recv`; also
        after the socket closed, for the outcomes it learnt)."""
        core = self._core
        out = _calls.take(self, lambda: core.take_cookies(1) or None, timeout, "recv_cookie")
        return out[0]

    def cookies(self, max_items: int = 1000) -> list[Cookie]:
        """The outcomes ready now, up to ``max_items``, without waiting (maybe [])."""
        if not isinstance(max_items, int) or max_items < 1:
            raise UsageError("cookies needs max_items >= 1")
        with self.node._driver.lock:
            got = self._core.take_cookies(max_items)
            if got:
                self.node._after_call()
        return got

    def _pattern_call(self, name: str, *args: Any) -> None:
        method = getattr(self._core, name, None)
        if method is None:
            raise UsageError(f"a {self.kind} socket has no {name}()")
        with self.node._driver.lock:
            self._check_open()
            method(*args)
            self.node._after_call()

    @property
    def readable(self) -> bool:
        if self._inbox:
            return True
        with self.node._driver.lock:
            return self._core.readable

    # ------------------------------------------------------------------ readiness

    def fileno(self) -> int:
        """A file descriptor that becomes readable when this socket becomes ready for
        something it was not ready for at the last :meth:`poll` (a message came, a send can
        go, a cookie's outcome is there), and at once if it is ready when first asked for:
        for ``select``, ``selectors``, ``poll`` or an event loop's ``add_reader``, as
        pyzmq's ``FD``.

        Edge-triggered: once it is readable, call ``poll(0, flags)`` (which reads it clear)
        and act until ``poll`` says the socket is no longer ready, e.g. ``while
        sock.poll(0) & a3m.POLLIN: sock.recv(timeout=0)``. The node's own thread keeps
        the network going meanwhile. Closing the socket closes the descriptor: remove it
        from an event loop first."""
        with self.node._driver.lock:
            self._check_open()
            pipe = self._ready_pipe
            if pipe is None:
                pipe = self._ready_pipe = ReadyPipe()
                pipe.changed(self._events_now())  # ready already: readable at once
                self.node._watch_ready(self, pipe)
            return pipe.r

    def poll(self, timeout: float | None = None, flags: int = POLLIN) -> int:
        """The events of ``flags`` (``POLLIN``, ``POLLOUT``, ``POLLCOOKIE``) this socket is
        ready for, waiting up to ``timeout`` seconds (None: for ever) until it is ready for
        one of them; 0 when the timeout passes first. Reads :meth:`fileno` clear."""
        deadline = _deadline(timeout)
        drv = self.node._driver
        got = 0

        def ready() -> bool:
            nonlocal got
            self._check_open()
            got = self._look(flags)
            return got != 0

        with drv.lock:
            drv.wait_until(ready, deadline)
            return got

    def _events_now(self) -> int:
        """Under the node's lock: every event the socket is ready for now."""
        core = self._core
        ev = POLLIN if self._inbox or core.readable else 0
        if core.writable:
            ev |= POLLOUT
        if core.cookies_ready:
            ev |= POLLCOOKIE
        return ev

    def _look(self, flags: int) -> int:
        """Under the node's lock: the descriptor read clear, then the events of ``flags``
        the socket is ready for (what it saw is remembered: a later change posts)."""
        pipe = self._ready_pipe
        if pipe is None:
            return self._events_now() & flags
        pipe.clear()
        ev = pipe.seen = self._events_now()
        return ev & flags

    def _ready_changed(self) -> None:
        """Under the node's lock, after a turn or a call (the node's listener): post on
        the descriptor if the socket became ready for something new."""
        pipe = self._ready_pipe
        if pipe is not None:
            pipe.changed(self._events_now())

    @property
    def writable(self) -> bool:
        with self.node._driver.lock:
            return self._core.writable

    # ------------------------------------------------------------------ options, close

    def get_option(self, name: str) -> Any:
        with self.node._driver.lock:
            return self._core.get_option(name)

    def set_option(self, name: str, value: Any) -> None:
        with self.node._driver.lock:
            self._core.set_option(name, value)
            self.node._after_call()

    def close(self, timeout: float | None = None) -> bool:
        """Unlink everything cleanly (what is in flight is delivered), then free the tag.

        Returns False when the timeout passed first (the socket is closed anyway)."""
        if self._closed:
            return True
        deadline = _deadline(timeout)
        drv = self.node._driver
        with drv.lock:
            return run_steps(self._closing(), lambda done: drv.wait_until(done, deadline))

    def _closing(self) -> Steps:
        """The steps of :meth:`close`, under the node's lock (see :func:`run_steps`; the
        asyncio socket runs the same ones)."""
        drv = self.node._driver
        self._close_buffer()
        buf = self._sbuf
        clean = True

        def sent() -> bool:  # what was buffered goes before the unlink
            if len(buf) and drv.running:
                self._drain(time.monotonic())
            # (no link left to take it: given up below, not waited for: close is bounded)
            return (not len(buf) or not drv.running
                    or (buf.stalled and not self._core.established_links()))

        yield sent
        for cookie in buf.clear_marks():  # no link took them in time: not sent
            self._core.jar.unsent(cookie)
        if buf.clear():
            clean = False
            self.node._stalled.discard(self)
        self._drop_flagged()
        self._core.close(time.monotonic())
        self.node._after_call()
        core = self._core
        clean = (yield lambda: core.is_drained or not drv.running) and clean
        if core.jar.out:  # outcomes still awaited: nobody will hear them now
            core.jar.abandon()
            clean = False
        self._closed = True
        self.node._forget_socket(self.id.tag)
        if self._ready_pipe is not None:
            self.node._watch_ready(self, None)
            self._ready_pipe.close()
        return clean

    def __enter__(self) -> Socket:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close(timeout=5)

    def _check_open(self) -> None:
        if self._closed:
            raise Closed(f"socket {self.id.tag!r} is closed")
        self.node._check_open()

    def __repr__(self) -> str:
        return f"<a3m.Socket {self.kind} {self.id.node}/{self.id.tag}>"


class Poller:
    """Wait on several sockets at once (pyzmq style)."""

    def __init__(self) -> None:
        self._sockets: dict[Socket, int] = {}

    def register(self, socket: Socket, events: int = POLLIN | POLLOUT) -> None:
        self._sockets[socket] = events

    def unregister(self, socket: Socket) -> None:
        self._sockets.pop(socket, None)

    def _ready(self, lock: bool = False) -> list[tuple[Socket, int]]:
        """The sockets ready for what they were registered for, each looked at (under its
        node's lock: taken here with ``lock``, else held by the caller)."""
        out = []
        for sock, wanted in self._sockets.items():
            if lock:
                with sock.node._driver.lock:
                    ev = sock._look(wanted)
            else:
                ev = sock._look(wanted)
            if ev:
                out.append((sock, ev))
        return out

    def poll(self, timeout: float | None = None) -> list[tuple[Socket, int]]:
        """Sockets with the events they are ready for; empty when the timeout passes.

        Sockets of one node wait on that node's turns; sockets of several nodes wait on
        their descriptors (:meth:`Socket.fileno`) together, woken by whichever node's
        turn made one of them ready."""
        deadline = _deadline(timeout)
        nodes = {s.node for s in self._sockets}
        if not nodes:
            if timeout:
                time.sleep(timeout)
            return []
        if len(nodes) == 1:
            drv = next(iter(nodes))._driver
            with drv.lock:
                while True:
                    ready = self._ready()
                    if ready:
                        return ready
                    left = None if deadline is None else deadline - time.monotonic()
                    if left is not None and left <= 0:
                        return []
                    drv.wait(left)
        waiting = select.poll()
        for sock in self._sockets:
            waiting.register(sock.fileno(), select.POLLIN)
        while True:
            ready = self._ready(lock=True)
            if ready:
                return ready
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return []
            waiting.poll(None if left is None else math.ceil(left * 1000))
