"""``a3m.Node``: the blocking, thread-safe API over the core and Exon (its sockets and
``Poller`` are in :mod:`a3m.runtime.sockets`, re-exported here).

One node = one Exon protocol + one :class:`~a3m.core.node_core.NodeCore`, driven by one I/O
thread (:class:`~a3m.runtime.driver.Driver`). Application threads call into the core under the
driver's lock; blocking calls wait through ``Driver.wait`` (the first waiter runs the I/O loop
itself, the others wait on the condition, notified after every batch of events). Nothing the
core produces is dropped: what Exon cannot take yet (its window is full) waits in an outbox
that the credits bound.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from dataclasses import fields
from functools import partial
from random import Random
from typing import TYPE_CHECKING, Any

from a3m._dataplane import native
from a3m.core.node_core import NodeCore
from a3m.core.socket_core import SocketCore
from a3m.core.transport import ExonBridge
from a3m.errors import Closed, UsageError
from a3m.exon.config import ExonConfig
from a3m.exon.engine import new_protocol
from a3m.exon.secure import format_public_key
from a3m.ids import SocketId
from a3m.patterns import GroupDirectory, register_builtin
from a3m.runtime.cork import Cork
from a3m.runtime.driver import Driver
from a3m.runtime.endpoint import make_clock_store, make_resolver, path_mtu_for
from a3m.runtime.events import (
    HANDSHAKE_REFUSED,
    HANDSHAKE_REFUSED_EVERY_S,
    KEY_REFUSED,
    EventQueue,
    NodeEvent,
)
from a3m.runtime.exchange import KINDS as EXCHANGED
from a3m.runtime.exchange import ExchangeSocket, Lender, weak_method
from a3m.runtime.exchange import wanted as exchange_wanted
from a3m.runtime.identity import node_key
from a3m.runtime.node_turn import after_call, on_turn, take_buffers, upper_deadline, upper_output
from a3m.runtime.ready_fd import ReadyPipe
from a3m.runtime.socket_calls import check_timeout as _check_timeout
from a3m.runtime.sockets import (
    POLLIN,
    POLLOUT,
    Poller,
    ReceivedMessage,
    Socket,
    Steps,
    _deadline,
    run_steps,
)

__all__ = ["POLLIN", "POLLOUT", "Node", "NodeEvent", "Poller", "ReceivedMessage", "Socket",
           "SocketId"]

if TYPE_CHECKING:
    from a3m.journal import NodeJournal

_EXON_FIELDS = {f.name for f in fields(ExonConfig)}


class Node:
    """An A3M node: a container of sockets with one UDP address and one global id."""

    def __init__(self, node_id: str | None = None, bind: str | tuple[str, int] = "127.0.0.1:0",
                 *, clock_file: str | os.PathLike[str] | None = None, discovery: Any = None,
                 seed: int | None = None, journal: str | os.PathLike[str] | None = None,
                 key: Any = None, key_file: str | os.PathLike[str] | None = None,
                 **options: Any) -> None:
        unknown = sorted(set(options) - _EXON_FIELDS)
        if unknown:
            raise UsageError(f"unknown node option(s): {', '.join(unknown)}")
        self.id = node_id or f"node-{os.getpid()}-{os.urandom(4).hex()}"
        config = ExonConfig.from_options(options)
        rng = Random(seed)
        self._resolver = make_resolver(discovery)
        self._proto = new_protocol(self.id, config, Random(rng.random()),
                                   make_clock_store(clock_file), self._resolver,
                                   path_mtu=path_mtu_for(config),
                                   key=(node_key(key, key_file, clock_file, node_id)
                                        if config.secure else None),
                                   entropy=os.urandom)
        self._core = NodeCore(self.id, Random(rng.random()),
                              max_message_size=config.max_message_size)
        register_builtin(self._core)
        GroupDirectory.of(self._core)  # lists this node's DISH sockets to RADIOs
        self._nodes_listed_at = -1.0
        self._list_nodes(0.0)
        self.journal: NodeJournal | None = None
        if journal is not None:  # the delivery journal (SPEC 8), written by its own thread
            from a3m.journal import NodeJournal

            self.journal = NodeJournal(journal, self.id)
            self._core.observer = self.journal
        #: What happened to links and peers, for :meth:`events` (and the log).
        self._events = EventQueue(self.id)
        self._keys_told: set[tuple[str, bytes]] = set()
        self._shed_seen = 0  # handshakes refused under load, as last told (events)
        self._shed_look_at = 0.0
        self._core.link_event = self._link_event
        self._bridge = ExonBridge(self._core, self._proto, self._key_refused, self._peer_event)
        self._sockets: dict[str, Socket] = {}
        self._listeners: list[Callable[[], None]] = []
        #: Sockets asked for their descriptor (:meth:`Socket.fileno`): posted on after
        #: every turn and call by :meth:`_post_ready`, a listener while there are some.
        self._ready_watched: dict[Socket, None] = {}
        self._closed = False
        self._cork = Cork(config.cork_s)
        #: Sockets whose send buffer is open (see :meth:`Socket.send`): the I/O thread's
        #: turn hands what they buffered to the core, by the end of the cork window.
        self._buffering: set[Socket] = set()
        #: Sockets whose inbox holds messages sent with a cookie: each turn reports those
        #: the application took since (Socket._report), and turns come every AHEAD_LOOK_S.
        self._reading_ahead: set[Socket] = set()
        self._taken_due = 0.0  # when the core's waiting TAKEN reports leave at the latest
        #: Sockets whose buffer holds sends no link can take now (a link went away): retried
        #: on every turn (credits and links come with events).
        self._stalled: set[Socket] = set()
        # What runs per message and per turn, compiled (runtime/node_turn.py), bound here:
        # the driver's hooks and the after-call of every application call.
        self._upper_deadline: Callable[[], float | None] = partial(upper_deadline, self)
        self._upper_output: Callable[[], bool] = partial(upper_output, self)
        self._on_turn: Callable[[float], None] = partial(on_turn, self)
        #: ``_after_call(now=-1.0, sock=None)``: see :func:`~a3m.runtime.node_turn.after_call`.
        self._after_call: Callable[..., None] = partial(after_call, self)
        #: REQ and REP's native exchange (``a3m.runtime.exchange``; None: none, the core
        #: does it all): made where the driver's leaders wait natively.
        self._lender: Lender | None = None
        self._driver = self._make_driver(bind, config)
        drv = self._driver
        if (native is not None and config.secure and exchange_wanted()
                and getattr(drv, "_lead_io", None) is not None):
            x = native.Exchange(self._proto, drv._io, weak_method(self, "_wake_driver"),
                                weak_method(self, "_unsent"))
            drv.exchange = x
            self._lender = Lender(x.table, self._core, self._may_lend)
            self._core.take_back = self._lender.take_back

    def _make_driver(self, bind: str | tuple[str, int], config: ExonConfig) -> Driver:
        """The I/O under the node: one thread here; ``a3m.aio`` drives it from its loop."""
        return Driver(self._proto, bind, self._bridge.on_events, name=f"a3m-node-{self.id}",
                      upper_timer=self._upper_deadline, on_turn=self._on_turn,
                      busy_poll_s=config.busy_poll_s, upper_output=self._upper_output,
                      upper_waits=self._bridge.waits)

    # ------------------------------------------------------------------ API

    @property
    def address(self) -> tuple[str, int]:
        return self._driver.address

    def associate(self, node_id: str, address: Any, public_key: str | bytes | None = None
                  ) -> None:
        """Tell this node where ``node_id`` can be reached; with ``public_key`` (its
        ``Node.public_key``), only that key may ever speak as ``node_id`` here."""
        if isinstance(address, list):
            address = tuple(address)
        def associate() -> None:
            self._proto.associate(node_id, address, public_key)
            self._core.node_known(node_id)

        self._driver.call(associate)

    @property
    def public_key(self) -> str | None:
        """This node's long-term public key (64 hex digits) for peers to pin; None when the
        node opted out of security (``secure=False``)."""
        sec = self._proto.secure
        return None if sec is None else format_public_key(sec.key.public)

    def rebind(self, bind: str | tuple[str, int]) -> None:
        """Move to another local address; links and messages in flight are kept."""
        self._driver.rebind(bind)

    def register_socket_type(self, name: str, factory: Callable[..., SocketCore]) -> None:
        """Register a custom socket kind: ``factory(node_core, tag, rng, **options)``, usually
        a :class:`~a3m.core.SocketCore` subclass."""
        with self._driver.lock:
            self._core.register_type(name, factory)

    def socket(self, kind: str | Callable[..., SocketCore], tag: str | None = None,
               **options: Any) -> Socket:
        """Create a socket of ``kind`` (``a3m.PUSH``, a registered name, or a factory)."""
        with self._driver.lock:
            self._check_open()
            if isinstance(kind, str) and kind.upper() not in self._core.types:
                raise UsageError(f"socket kind {kind!r} is not available (known: "
                                 f"{', '.join(sorted(self._core.types))})")
            core = self._core.create(kind, tag, **options)
            lender = self._lender
            sock = (Socket(self, core) if lender is None or type(core) not in EXCHANGED
                    else ExchangeSocket(self, core, lender))
            self._sockets[core.tag] = sock
            return sock

    @property
    def stats(self) -> dict[str, Any]:
        drops = self._driver.rx_drops()  # (reads /proc: not under the lock)
        with self._driver.lock:
            drv = self._driver
            return {"exon": self._proto.stats.as_dict(), "malformed": self._core.malformed,
                    "not_found": self._core.not_found, "outbox": len(self._bridge.outbox),
                    "dropped_closing": self._bridge.dropped_closing,
                    "lost_messages": self._core.lost_messages,
                    "peers_unreachable": self._bridge.peers_unreachable,
                    "peers_reachable": self._bridge.peers_reachable,
                    "peers_restarted": self._bridge.peers_restarted,
                    "io_errors": drv.io_errors, "loop_errors": drv.loop_errors,
                    "event_errors": drv.event_errors, "rx_drops": drops,
                    "events": dict(self._events.told),
                    "events_dropped": self._events.dropped, "tables": self._tables()}

    def _tables(self) -> dict[str, int]:
        """Under the lock: how much state the node holds (what a long run must keep flat)."""
        socks = self._core.sockets
        send, recv = self._proto.record_counts()
        sec = self._proto.secure
        return {"sockets": len(socks), "links": sum(len(c.links) for c in socks.values()),
                "cookies": sum(c.jar.held for c in socks.values()),
                "send_records": send, "recv_records": recv,
                "sessions": 0 if sec is None else sec.session_count(),
                "outbox": len(self._bridge.outbox), "events": len(self._events.items)}

    def events(self, timeout: float | None = None) -> Iterator[NodeEvent]:
        """What happens to this node's links and peers, as it happens
        (:class:`~a3m.NodeEvent`: linked, unlinked, link_refused, peer_unreachable,
        peer_reachable, peer_restarted, key_refused, handshake_refused), oldest first.

        The iterator waits for each next event; it ends when ``timeout`` seconds pass without
        one (``timeout=0``: it yields what is there and ends), or once the node closed and
        every event was read. Events are kept from the node's start until read (the last
        4096: older ones are counted in ``stats["events_dropped"]``); each is also a log
        line on the ``a3m.events`` logger. Several iterators share the one queue."""
        _check_timeout(timeout)
        drv = self._driver
        queue = self._events
        while True:
            with drv.lock:
                ev = queue.pop()
                if ev is None:
                    if self._closed or not drv.running or timeout == 0:
                        return
                    deadline = None if timeout is None else time.monotonic() + timeout
                    drv.wait_until(lambda: bool(queue.items) or self._closed
                                   or not drv.running, deadline)
                    ev = queue.pop()
                    if ev is None:
                        return
            yield ev

    def _link_event(self, kind: str, tag: str, peer: tuple[str, str], reason: str) -> None:
        """The core's word on a link (under the lock, on any thread)."""
        self._events.add(NodeEvent(kind, SocketId(peer[0], peer[1]), SocketId(self.id, tag),
                                   0, reason))

    def _peer_event(self, kind: str, peer: str, unknown: int, reason: str) -> None:
        """The bridge's word on a peer node (under the lock)."""
        self._events.add(NodeEvent(kind, SocketId(peer, ""), None, unknown, reason))

    def _key_refused(self, peer: str, key: bytes) -> None:
        """A handshake as ``peer`` refused for its key: told once per peer and key (the
        refused side keeps trying: its handshakes are refused every time)."""
        told = self._keys_told
        if (peer, key) in told or len(told) > 1024:
            return
        told.add((peer, key))
        self._events.add(NodeEvent(
            KEY_REFUSED, SocketId(peer, ""), None, 0,
            f"refused a handshake as {peer!r}: key {key.hex()} is not the one pinned for it "
            f"or first seen with it (a "
            f"different node, or {peer!r} lost its key file); pin the right key with "
            "associate(..., public_key=...)"))

    def _look_at_handshakes(self, now: float) -> None:
        """At most once a second (on a turn): tell of handshakes refused under load since."""
        self._shed_look_at = now + HANDSHAKE_REFUSED_EVERY_S
        st = self._proto.stats
        shed, full = st.unauth_shed, st.sessions_full
        if shed + full > self._shed_seen:
            new = shed + full - self._shed_seen
            self._shed_seen = shed + full
            self._events.add(NodeEvent(
                HANDSHAKE_REFUSED, SocketId("", ""), None, 0,
                f"{new} handshake(s) refused under load ({shed} shed by the handshake "
                f"budgets, {full} for want of room for sessions, since the start)"))

    def flush(self, timeout: float | None = None) -> bool:
        """Block until every message sent so far is acknowledged by the node it went to
        (nothing left queued or in flight); False when the timeout passes first."""
        deadline = _deadline(timeout)
        drv = self._driver
        with drv.lock:
            return run_steps(self._flushing(), lambda done: drv.wait_until(done, deadline, 0.01))

    def _flushing(self) -> Steps:
        """The steps of :meth:`flush` (see :func:`~a3m.runtime.sockets.run_steps`)."""
        drv = self._driver

        def acknowledged() -> bool:
            if not (self._buffering or self._stalled or self._bridge.outbox
                    or self._proto.in_flight() > 0):
                return True
            now = time.monotonic()
            if self._buffering or self._stalled:
                take_buffers(self, now)
            self._check_open()
            self._bridge.pump(now)
            drv.wake()
            return False

        return (yield acknowledged)

    def close(self, timeout: float | None = None) -> bool:
        """Close every socket (unlinking cleanly), deliver what is in flight, stop.

        Returns False when the timeout passed first, a sender to this node never confirmed
        the revocation of its slots, or a peer silent for ``peer_timeout_s`` was given up with
        messages of ours (see :meth:`a3m.exon.Endpoint.close`). After a clean close
        the node lingers a few seconds in the background, answering its peers' late frames so
        that their close is prompt too (``close_linger_rtos``)."""
        if self._closed:
            return True
        deadline = _deadline(timeout)
        clean = True
        self._end_exchange()
        for sock in list(self._sockets.values()):
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            clean = sock.close(left) and clean
        clean = self._close_hidden(deadline) and clean
        bridge = self._bridge
        clean = self._driver.close_protocol(deadline, bridge.pump,
                                            lambda: bool(bridge.outbox)) and clean
        self._closed = True
        if self.journal is not None:
            self.journal.close(None if deadline is None else
                               max(1.0, deadline - time.monotonic()))
        return clean

    def __enter__(self) -> Node:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close(timeout=10)

    def __repr__(self) -> str:
        return f"<a3m.Node {self.id!r}{' closed' if self._closed else ''}>"

    # ------------------------------------------------------------------ internals

    def _end_exchange(self) -> None:
        """Closing: every lent socket back in the core, and the engine hands lent sockets
        nothing more (``a3m.runtime.exchange``)."""
        lender = self._lender
        if lender is None:
            return
        drv = self._driver
        with drv.lock:
            lender.take_all_back()
            lender.waiting.clear()
            self._lender = None
            drv.exchange.detach()

    def _may_lend(self, core: SocketCore) -> bool:
        """Under the lock: the runtime's conditions for lending ``core`` to the exchange
        (its node open, no listener, its socket's descriptor not watched)."""
        if self._listeners or self._closed:
            return False
        sock = self._sockets.get(core.tag)
        return sock is not None and sock._ready_pipe is None

    def _wake_driver(self, locked: bool) -> None:
        """A native exchange's send left output to Python or set an earlier timer; ``locked``:
        the calling thread holds the driver's lock already (a ``recv`` waiting)."""
        if locked:
            self._driver.wake()
        else:
            self._driver.wake_locked()

    def _unsent(self, peer: str, data: bytes, locked: bool) -> None:
        """A message a native exchange made and Exon refused after all (the node closing):
        the bridge's outbox holds it as any other, and a turn pumps it (``locked``: as for
        :meth:`_wake_driver`)."""
        drv = self._driver
        if not locked:
            with drv.lock:
                self._unsent(peer, data, True)
            return
        self._bridge.outbox.append((peer, data))
        drv.wake()

    def _check_open(self) -> None:
        if self._closed or not self._driver.running:
            raise Closed(f"node {self.id!r} is closed")

    def add_listener(self, fn: Callable[[], None]) -> None:
        """Call ``fn`` (from the I/O thread) after every turn that changed something."""
        with self._driver.lock:
            self._listeners.append(fn)

    def remove_listener(self, fn: Callable[[], None]) -> None:
        with self._driver.lock:
            if fn in self._listeners:
                self._listeners.remove(fn)

    def _watch_ready(self, sock: Socket, pipe: ReadyPipe | None) -> None:
        """Under the lock: post on ``sock``'s descriptor after every turn and call (a pipe),
        or no longer (None)."""
        watched = self._ready_watched
        if pipe is not None:
            if not watched:
                self._listeners.append(self._post_ready)
            watched[sock] = None
        elif sock in watched:
            del watched[sock]
            if not watched:
                self._listeners.remove(self._post_ready)

    def _post_ready(self) -> None:
        for sock in self._ready_watched:
            sock._ready_changed()

    def unreachable_peers(self) -> list[str]:
        """Node ids reported unreachable (silent for ``peer_timeout_s`` while holding messages
        of ours) and not heard from since."""
        with self._driver.lock:
            return list(self._proto.unreachable_peers())

    def _close_hidden(self, deadline: float | None) -> bool:
        """Close the sockets the application has no handle on (the group directory)."""
        drv = self._driver
        with drv.lock:
            return run_steps(self._closing_hidden(),
                             lambda done: drv.wait_until(done, deadline))

    def _closing_hidden(self) -> Steps:
        """The steps of :meth:`_close_hidden` (see :func:`~a3m.runtime.sockets.run_steps`)."""
        drv = self._driver
        hidden = [c for tag, c in self._core.sockets.items() if tag not in self._sockets]
        for core in hidden:
            core.close(time.monotonic())
        self._after_call()
        return (yield lambda: all(c.is_drained for c in hidden) or not drv.running)

    def _list_nodes(self, now: float) -> None:
        """Tell the core of the nodes the discovery source lists (RADIOs look among them);
        a file source is looked at again every second."""
        nodes = getattr(self._resolver, "nodes", None)
        if nodes is None or now - self._nodes_listed_at < 1.0:
            return
        self._nodes_listed_at = now
        try:
            listed = nodes()
        except (OSError, ValueError):
            return  # a file being rewritten: next time
        for node_id in listed:
            self._core.node_known(str(node_id))

    def _forget_socket(self, tag: str) -> None:
        sock = self._sockets.pop(tag, None)
        if sock is not None:
            self._buffering.discard(sock)
            self._stalled.discard(sock)
        self._core.remove(tag)
