"""``a3m.exon.Endpoint``: the Exon transport on its own, with a blocking, thread-safe API."""

from __future__ import annotations

import ipaddress
import os
import time
from collections import deque
from collections.abc import Callable, Hashable, Mapping
from random import Random
from typing import Any, cast

from a3m.errors import Closed, Timeout, UsageError, WouldBlock
from a3m.exon.clock import ClockStore
from a3m.exon.config import ExonConfig
from a3m.exon.discovery import Resolver, StaticDiscovery
from a3m.exon.engine import new_protocol
from a3m.exon.events import (
    Delivered,
    Event,
    KeyRefused,
    NotDelivered,
    OutcomeUnknown,
    ReceiptReady,
)
from a3m.exon.secure import format_public_key
from a3m.runtime.clock_store import FileClockStore, WallClockStore
from a3m.runtime.cork import Cork
from a3m.runtime.discovery_file import FileDiscovery
from a3m.runtime.driver import Driver
from a3m.runtime.identity import node_key, warn_key_refused
from a3m.runtime.send_buffer import SendBuffer, new_send_buffer

#: Most sends the Endpoint's buffer takes between two turns of the I/O thread.
SEND_BUFFER = 1024


def _deadline(timeout: float | None) -> float | None:
    if timeout is None:
        return None
    if timeout < 0:
        raise UsageError("timeout must be >= 0 or None")
    return time.monotonic() + timeout


def _remaining(deadline: float | None) -> float | None:
    return None if deadline is None else deadline - time.monotonic()


def make_resolver(discovery: Any) -> Resolver | None:
    """A mapping becomes a static map, a path a file source, a callable is used as is."""
    if discovery is None or callable(discovery):
        return cast("Resolver | None", discovery)
    if isinstance(discovery, Mapping):
        return StaticDiscovery(discovery)
    if isinstance(discovery, (str, os.PathLike)):
        return FileDiscovery(discovery)
    raise UsageError("discovery must be a mapping, a file path or a callable")


def path_mtu_for(config: ExonConfig) -> Callable[[Hashable], int]:
    """Loopback peers get ``loopback_datagram_size`` (64 KiB path MTU), others the default."""
    big, normal = config.loopback_datagram_size, config.max_datagram_size

    def mtu(addr: Hashable) -> int:
        if big and isinstance(addr, tuple) and addr:
            try:
                if ipaddress.ip_address(addr[0]).is_loopback:
                    return big
            except ValueError:
                pass
        return normal

    return mtu


def make_clock_store(clock_file: str | os.PathLike[str] | None) -> ClockStore:
    return WallClockStore() if clock_file is None else FileClockStore(clock_file)


class Endpoint:
    """An Exon node on a UDP socket: exactly-once delivery of byte payloads between node ids.

    Options: every :class:`~a3m.exon.ExonConfig` field by name, plus ``clock_file`` (where the
    node clock is reserved ahead of use; by default the wall clock seeds it) and ``discovery``
    (a mapping ``id -> (host, port)``, a path to an ``id,host,port`` file, or a callable).
    """

    def __init__(self, node_id: str | None = None, bind: str | tuple[str, int] = "127.0.0.1:0",
                 *, clock_file: str | os.PathLike[str] | None = None, discovery: Any = None,
                 seed: int | None = None, key: Any = None,
                 key_file: str | os.PathLike[str] | None = None, **options: Any) -> None:
        self.id = node_id or f"exon-{os.getpid()}-{os.urandom(4).hex()}"
        config = ExonConfig.from_options(options)
        self._proto = new_protocol(self.id, config, Random(seed),
                                   make_clock_store(clock_file), make_resolver(discovery),
                                   path_mtu=path_mtu_for(config),
                                   key=(node_key(key, key_file, clock_file, node_id)
                                        if config.secure else None),
                                   entropy=os.urandom)
        self._inbox: deque[tuple[str, bytes]] = deque()
        self._receipts: set[int] = set()
        # Messages whose destination crashed with them in flight (OutcomeUnknown): kept for
        # outcome_unknown() (the newest 65536; stats["outcome_unknown"] counts them all).
        self._unknown: deque[tuple[str, bytes, int | None]] = deque(maxlen=65536)
        self._unknown_receipts: set[int] = set()
        # Messages given up with abandon() before they ever wholly left (NotDelivered).
        self._not_delivered: deque[tuple[str, bytes, int | None]] = deque(maxlen=65536)
        self._closed = False
        self._warn_key = warn_key_refused(self.id)
        self._cork = Cork(config.cork_s)
        #: In a stream, sends wait here for the I/O thread's turn without the lock (see
        #: :meth:`send`): ``(node_id, payload)``, as many as the windows to ``_sdst`` took.
        self._sbuf: SendBuffer[tuple[str, bytes]] = new_send_buffer()
        self._sdst: str | None = None
        self._fast_size = 0
        self._buffering = False  # the buffer is open, or holds sends: the turn looks at it
        self._driver = Driver(self._proto, bind, self._on_events, name=f"a3m-io-{self.id}",
                              busy_poll_s=config.busy_poll_s, upper_timer=self._cork_deadline,
                              on_turn=self._on_turn, upper_output=self._buffered)

    # ------------------------------------------------------------------ API

    @property
    def address(self) -> tuple[str, int]:
        """The local ``(host, port)``."""
        return self._driver.address

    @property
    def stats(self) -> dict[str, int]:
        with self._driver.lock:
            out: dict[str, int] = self._proto.stats.as_dict()
        out["io_errors"] = self._driver.io_errors
        out["loop_errors"] = self._driver.loop_errors
        out["event_errors"] = self._driver.event_errors
        return out

    def associate(self, node_id: str, address: Hashable,
                  public_key: str | bytes | None = None) -> None:
        """Register where ``node_id`` can be reached (authenticated traffic from it updates
        this later); ``public_key`` pins the only key that may speak as it."""
        if isinstance(address, list):
            address = tuple(address)
        self._driver.call(lambda: self._proto.associate(node_id, address, public_key))

    @property
    def public_key(self) -> str | None:
        """This node's long-term public key (64 hex digits); None without security."""
        sec = self._proto.secure
        return None if sec is None else format_public_key(sec.key.public)

    def rebind(self, bind: str | tuple[str, int]) -> None:
        """Move to another local address mid-stream; peers follow without losing anything."""
        self._check_open()
        self._driver.rebind(bind)

    def send(self, node_id: str, payload: bytes, receipt: bool = False,
             timeout: float | None = None) -> int | None:
        """Send ``payload`` to ``node_id`` exactly once; blocks while the windows are full.

        Returns a receipt id when ``receipt`` is true. ``timeout=0`` never blocks (raises
        :class:`~a3m.errors.WouldBlock`); a timeout that passes raises
        :class:`~a3m.errors.Timeout` and nothing was sent.

        In a stream to one node (a send within ``cork_s`` of the previous one), sends wait in
        the Endpoint's buffer for the I/O thread's next turn without taking its lock: as many
        as the windows to that node took when the buffer opened, so a send still returns only
        once the windows admit it.
        """
        buf = self._sbuf
        if (buf.room and node_id == self._sdst and not receipt and type(payload) is bytes
                and len(payload) <= self._fast_size and (timeout is None or timeout >= 0)
                and buf.offer((node_id, payload))):
            return None
        deadline = _deadline(timeout)
        drv = self._driver
        with drv.lock:
            while True:
                self._check_open()
                now = time.monotonic()
                try:
                    if len(buf) and not self._drain(now) and len(buf):
                        raise WouldBlock("the windows are full")  # buffered sends go first
                    rid: int | None = self._proto.send(node_id, payload, now, receipt)
                except WouldBlock:
                    if timeout == 0:
                        raise
                    left = _remaining(deadline)
                    if left is not None and left <= 0:
                        raise Timeout(f"send to {node_id!r} timed out (window full)") from None
                    drv.wake()
                    drv.wait(left)
                    continue
                cork = self._cork  # (a stream waits for the turn: see runtime/cork.py)
                if cork.follows(now):
                    if not receipt and not buf.room and not buf.stalled:
                        self._open_buffer(node_id)
                    drv.wake_by(cork.due(now))
                else:
                    drv.flush()
                return rid

    def _cork_deadline(self) -> float | None:
        """The end of the cork window while the protocol holds output or the buffer is
        open (see :meth:`send`)."""
        if (self._buffering and not self._sbuf.stalled) or self._proto.has_output():
            return self._cork.until
        return None

    def _buffered(self) -> bool:
        return self._buffering

    def _open_buffer(self, dst: str) -> None:
        """Under the lock: let the next sends to ``dst`` wait in the buffer, as many as the
        windows admit now."""
        proto = self._proto
        self._sdst = dst  # (set before the buffer opens: nothing is offered while shut)
        self._fast_size = proto.max_unfragmented(dst)
        if self._sbuf.open(min(proto.send_room(dst), SEND_BUFFER)):
            self._buffering = True

    def _drain(self, now: float) -> bool:
        """Under the lock: hand the buffered sends to the protocol, in order (True when some
        went; :meth:`SendBuffer.drain`). What the windows do not admit now stays first in
        line, retried on every turn."""
        proto = self._proto

        def hand(items: list[tuple[str, bytes]], marks: object) -> int:
            i, n = 0, len(items)
            while i < n:
                dst = items[i][0]
                j = i + 1  # the run of sends to one node, in bulk
                while j < n and items[j][0] == dst:
                    j += 1
                run = [payload for _, payload in items[i:j]]
                went = proto.send_many(dst, run, now)
                if not went:  # the windows are full, or the first needs fragments
                    try:
                        proto.send(dst, run[0], now)
                    except WouldBlock:
                        return i
                    went = 1
                i += went
            return n

        return self._sbuf.drain(hand)

    def _on_turn(self, now: float) -> None:
        """The I/O thread's turn (or a leader leaving): drain the buffer; open it again
        while sends keep coming, close it after a window with none."""
        if not self._buffering:
            return
        if self._drain(now):
            if not self._sbuf.stalled and self._sdst is not None:
                self._open_buffer(self._sdst)
                self._driver.wake_by(self._cork.due(now))
                return
        elif self._sbuf.stalled or now < self._cork.until:
            return
        if self._sbuf.shut():
            self._buffering = False

    def recv(self, timeout: float | None = None) -> tuple[str, bytes]:
        """The next delivered ``(node_id, payload)``; blocks up to ``timeout`` seconds."""
        deadline = _deadline(timeout)
        drv = self._driver
        with drv.lock:
            while not self._inbox:
                self._check_open()
                left = _remaining(deadline)
                if left is not None and left <= 0:
                    if timeout == 0:
                        raise WouldBlock("nothing to receive")
                    raise Timeout("recv timed out")
                drv.wait(left)
            src, payload = self._inbox.popleft()
            self._proto.consumed(len(payload))
            if self._proto.has_output():
                drv.wake()  # a deferred grant may have been released
            return src, payload

    def recv_many(self, max_items: int = 1024, timeout: float | None = None
                  ) -> list[tuple[str, bytes]]:
        """Up to ``max_items`` delivered messages at once (at least one, or Timeout)."""
        first = self.recv(timeout)
        out = [first]
        with self._driver.lock:
            inbox = self._inbox
            nbytes = 0
            while inbox and len(out) < max_items:
                item = inbox.popleft()
                nbytes += len(item[1])
                out.append(item)
            if nbytes:
                self._proto.consumed(nbytes)
                if self._proto.has_output():
                    self._driver.wake()
        return out

    def wait_receipt(self, receipt_id: int, timeout: float | None = None) -> bool:
        """True once the destination acknowledged the message; False if the timeout passes or
        the message's outcome became unknown (its destination crashed with it in flight: see
        :meth:`outcome_unknown`) or it was given up undelivered (:meth:`not_delivered`)."""
        deadline = _deadline(timeout)
        drv = self._driver
        with drv.lock:
            while receipt_id not in self._receipts:
                if receipt_id in self._unknown_receipts:
                    self._unknown_receipts.discard(receipt_id)
                    return False
                if not drv.running:
                    return False
                left = _remaining(deadline)
                if left is not None and left <= 0:
                    return False
                drv.wait(left)
            self._receipts.discard(receipt_id)
            return True

    def outcome_unknown(self) -> list[tuple[str, bytes, int | None]]:
        """Take the messages reported as of unknown outcome since the last call, as
        ``(destination, payload, receipt id or None)``: their destination restarted after a
        crash while they were in flight, so each was delivered at most once, maybe never.
        Exon does not send them again; the application decides. (A graceful close of the
        destination never produces these.)"""
        with self._driver.lock:
            out = list(self._unknown)
            self._unknown.clear()
            return out

    def not_delivered(self) -> list[tuple[str, bytes, int | None]]:
        """Take the messages given up (:meth:`abandon`, or a close that gave up a silent peer)
        before they ever wholly left this node, as ``(destination, payload, receipt id or
        None)``: surely not delivered, so sending them again cannot duplicate them."""
        with self._driver.lock:
            out = list(self._not_delivered)
            self._not_delivered.clear()
            return out

    def unreachable_peers(self) -> list[str]:
        """Node ids that hold messages of ours and from which nothing was heard for
        ``peer_timeout_s`` (15 s by default), and not heard from since. Exon keeps
        retransmitting to them (exactly once if they come back); :meth:`abandon` gives up."""
        with self._driver.lock:
            return list(self._proto.unreachable_peers())

    def abandon(self, node_id: str) -> int:
        """Give up on ``node_id`` (say, one :meth:`unreachable_peers` lists): each message
        queued or in flight to it is reported, in :meth:`outcome_unknown` (it may have been
        delivered, at most once) or in :meth:`not_delivered` (it never wholly left), and is
        never sent again, even if the node comes back. Returns how many were reported."""
        with self._driver.lock:
            self._check_open()
            now = time.monotonic()
            n: int = self._proto.abandon(node_id, now)
            self._on_events(deque(self._proto.drain_events()), now)
            self._driver.notify_all()  # wait_receipt callers
            self._driver.flush()  # the release
            return n

    def in_flight(self) -> int:
        """Messages sent and not yet acknowledged (queued, buffered or in flight)."""
        with self._driver.lock:
            return int(self._proto.in_flight()) + len(self._sbuf)

    def close(self, timeout: float | None = None) -> bool:
        """Stop sending, wait (up to ``timeout``) until everything sent was acknowledged, the
        peers were told to release our slots, and every sender to us confirmed that it holds
        nothing bound to the slots we granted (so that an Endpoint started again with the same
        id and ``clock_file`` loses none of their messages), then stop. Returns True when that
        completed; False when the timeout passed first, or when a sender never confirmed
        (``close_revoke_timeout_s``): a restart then looks like a crash to the peers that did
        not answer (messages of unknown outcome, never a silent loss), or when a destination
        was silent for ``peer_timeout_s`` with messages of ours: the close gives it up (see
        :meth:`abandon`) rather than wait for ever.

        After a clean close the node lingers in the background (``close_linger_rtos``): its
        socket stays open a few seconds to answer the peers' late frames, so that their own
        close is prompt too. An Endpoint or Node of the same id or port started in this
        process ends it at once; so does the process's exit."""
        if self._closed:
            return True
        deadline = _deadline(timeout)
        drv = self._driver
        with drv.lock:  # what waits in the buffer leaves first
            buf = self._sbuf
            buf.shut()

            def sent() -> bool:
                if len(buf) and drv.running:
                    self._drain(time.monotonic())
                    drv.wake()
                return not len(buf) or not drv.running

            drv.wait_until(sent, deadline)
            given_up = bool(buf.clear())
            self._buffering = False
        clean = self._driver.close_protocol(deadline) and not given_up
        self._closed = True
        return clean

    def __enter__(self) -> Endpoint:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close(timeout=5)

    def __repr__(self) -> str:
        return f"<Endpoint {self.id!r}{' closed' if self._closed else ''}>"

    # ------------------------------------------------------------------ internals

    def _check_open(self) -> None:
        if self._closed or not self._driver.running:
            raise Closed(f"endpoint {self.id!r} is closed")

    def _on_events(self, events: deque[Event], now: float) -> None:
        inbox = self._inbox
        take = events.popleft  # taken before handling: see driver.EventHandler
        while events:
            ev = take()
            if type(ev) is Delivered:
                inbox.append((ev.source, ev.payload))
            elif type(ev) is ReceiptReady:
                self._receipts.add(ev.receipt_id)
            elif type(ev) is OutcomeUnknown:
                self._unknown.append((ev.destination, ev.payload, ev.receipt_id))
                if ev.receipt_id is not None:
                    self._unknown_receipts.add(ev.receipt_id)
            elif type(ev) is NotDelivered:
                self._not_delivered.append((ev.destination, ev.payload, ev.receipt_id))
                if ev.receipt_id is not None:
                    self._unknown_receipts.add(ev.receipt_id)
            elif type(ev) is KeyRefused:
                self._warn_key(ev.peer, ev.key)
            # PeerUnreachable / PeerReachable: counted in stats, listed by unreachable_peers()
