"""The Exon protocol as a sans-I/O state machine (:class:`ExonProtocol`).

Per message, the sender holds an envelope (a slot the receiver granted with SLOTS in answer to
REQSLOTS), sends the payload as a TOKEN bound to that slot and to the receive record's
incarnation, and retransmits it until the ACK. The receiver delivers a token only while its slot
is live and consumes the slot in the same step. Half-connections are created on demand and
discarded when idle; the node clock is the only lasting state. Rules and their reasons are in
``docs/design.md`` and ``docs/exon-wire.md``.

The object does no I/O: feed it datagrams, the current time and timer expiries; take from it
datagrams to send, events and the next deadline.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Callable, Hashable
from dataclasses import dataclass, fields
from random import Random
from typing import Any

from a3m.errors import Closed, MessageTooLarge, UsageError, WouldBlock
from a3m.exon import wire
from a3m.exon.clock import ClockStore, MemoryClockStore, NodeClock
from a3m.exon.config import ExonConfig
from a3m.exon.discovery import Resolver
from a3m.exon.events import (
    Delivered,
    Event,
    NotDelivered,
    OutcomeUnknown,
    PeerReachable,
    PeerUnreachable,
    ReceiptReady,
    Writable,
)
from a3m.exon.records import INF, Message, Reassembly, RecvRecord, SendRecord
from a3m.exon.recovery import PathRecovery

Address = Hashable

_TOKEN = wire.TOKEN
_ACK = wire.ACK
_REQSLOTS = wire.REQSLOTS
_SLOTS = wire.SLOTS
_VOID = wire.VOID
_REVOKE = wire.REVOKE
_REVOKED = wire.REVOKED
_TOKEN_PACK = wire.TOKEN_S.pack
_FRAG_PACK = wire.FRAG_S.pack
_REQSLOTS_PACK = wire.REQSLOTS_S.pack
_SLOTS_PACK = wire.SLOTS_S.pack
_VOID_PACK = wire.VOID_S.pack
_REVOKE_PACK = wire.REVOKE_S.pack
_REVOKED_PACK = wire.REVOKED_S.pack
_RANGE_SIZE = wire.RANGE_S.size
_RETRANSMIT = wire.as_retransmission
_FLAG_RETRANSMIT = wire.FLAG_RETRANSMIT
#: Most paths (per-peer RTT and window) remembered beyond their send records' lives.
MAX_PATHS = 4096
#: Tokens one probe timeout sends again (QUIC sends one or two probe packets).
PROBE_TOKENS = 2
#: Most peers remembered as unreachable (not heard since): beyond it the oldest is forgotten
#: (it gets no PeerReachable; a record still waiting on it may report it again).
MAX_UNREACHABLE = 4096
#: Retransmissions back off no further than ``peer_timeout_s`` / this, so a silent peer gets
#: at least this many transmissions (each of which it would answer) before it is reported.
PEER_CHANCES = 8


def _copy_no(tx: int) -> int:
    """The copy number REQSLOTS carries for its ``tx``-th transmission: 1..255, cycling."""
    return (tx - 1) % 255 + 1


class _Linger:
    """The timer of a closed node's linger (a timer-heap entry like a record's)."""

    __slots__ = ("alive", "timer_at", "end", "iv")

    def __init__(self, end: float, iv: float) -> None:
        self.alive = True
        self.timer_at = INF
        self.end = end
        self.iv = iv


_Timed = SendRecord | RecvRecord | _Linger


@dataclass(slots=True)
class ExonStats:
    """Counters of one node (monotonic, except the gauges marked as such)."""

    datagrams_in: int = 0
    datagrams_out: int = 0
    bytes_in: int = 0
    bytes_out: int = 0
    frames_in: int = 0
    frames_out: int = 0
    malformed: int = 0
    truncated: int = 0
    wrong_dst: int = 0
    from_self: int = 0
    tokens_sent: int = 0
    retransmits: int = 0
    fast_retransmits: int = 0  # of which declared lost: a later token was acknowledged
    probe_timeouts: int = 0  # probe timeouts expired (each sends a probe or two)
    congestion_events: int = 0  # window reductions (one per round at most)
    reqslots_sent: int = 0
    reqslots_retransmits: int = 0
    delivered: int = 0
    delivered_bytes: int = 0
    duplicates: int = 0  # tokens acked again without delivery (retransmission or stale)
    stale_frames: int = 0  # SLOTS/ACK/REQSLOTS for another incarnation or range
    reassembly_errors: int = 0
    no_address: int = 0  # frames held back because the peer's address is unknown
    address_changes: int = 0
    send_records_created: int = 0
    send_records_discarded: int = 0
    recv_records_created: int = 0
    recv_records_discarded: int = 0
    probes_sent: int = 0
    grants_deferred: int = 0
    # Receiver restarts (docs/exon-wire.md, "Restarts"):
    voids_sent: int = 0  # tokens for a record of an earlier incarnation: VOID, never ACK
    voids_received: int = 0
    revokes_sent: int = 0  # REVOKE frames sent while closing (retransmissions included)
    revokes_received: int = 0
    revocations_abandoned: int = 0  # senders that never confirmed (close_revoke_timeout_s)
    outcome_unknown: int = 0  # messages reported with OutcomeUnknown (receiver crashed)
    resent_whole: int = 0  # messages proven undelivered, sent again whole on fresh slots
    # After is_closed(), the linger (docs/exon-wire.md, "Closing: the linger"):
    linger_answers: int = 0  # frames answered while lingering (re-ACKs, VOIDs, releases)
    # Peer liveness (docs/exon-wire.md, "Peer liveness"):
    peers_unreachable: int = 0  # PeerUnreachable events (a peer silent for peer_timeout_s)
    peers_reachable: int = 0  # PeerReachable events (such a peer heard again)
    peers_abandoned: int = 0  # send records given up by abandon() (or a closing node)
    not_delivered: int = 0  # messages reported with NotDelivered (abandoned, never all sent)

    def as_dict(self) -> dict[str, int]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


class ExonProtocol:
    """One Exon node, without I/O. See ``docs/design.md`` section 1 for the driving contract."""

    def __init__(
        self,
        node_id: str,
        config: ExonConfig | None = None,
        rng: Random | None = None,
        clock_store: ClockStore | None = None,
        resolver: Resolver | None = None,
        path_mtu: Callable[[Address], int] | None = None,
    ) -> None:
        self.id = node_id
        self._id_bytes = node_id.encode("utf-8")
        wire.encode_id(node_id)  # validates
        self.config = cfg = config or ExonConfig()
        self._rng = rng or Random(0)
        self._clock = NodeClock(clock_store or MemoryClockStore(), cfg.clock_reserve_block)
        # Every record incarnation an earlier incarnation of this node took is below the clock
        # it starts from (the store reserves ahead of use): an r below _boot is a dead record.
        self._boot = self._clock.value
        self._resolver = resolver
        self.stats = ExonStats()
        self._sr: dict[str, SendRecord] = {}
        self._rr: dict[str, RecvRecord] = {}
        self._addr: dict[str, Address] = {}
        self._headers: dict[str, bytes] = {}
        self._src_cache: dict[bytes, str] = {}
        self._out: dict[str, list[bytes]] = {}
        self._acks: dict[str, dict[int, list[int]]] = {}
        # Delayed acknowledgements: pending ACKs leave with the next frame to their peer, or at
        # _ack_due, or at once (_ack_now: a duplicate, a second datagram of tokens, closing).
        self._ack_due = INF
        self._ack_now = False
        self._ack_dgrams = 0
        self._ack_delay = cfg.ack_delay_s
        self._events: deque[Event] = deque()
        self._timers: list[tuple[float, int, _Timed]] = []
        self._timer_seq = 0
        self._pending_total = 0
        self._buffered = 0
        self._deferred: dict[str, RecvRecord] = {}
        self._blocked = False
        self._closing = False
        self._revoke_until = INF
        # Closing (docs/exon-wire.md, "Closing: the linger"): records whose revocation was
        # abandoned (peer -> r: a late token bound to one gets VOID, never an ACK), peers our
        # send records released while closing (their releases are sent again while lingering)
        # and the linger itself, from is_closed() on.
        self._abandoned: dict[str, int] = {}
        self._released: set[str] = set()
        self._linger: _Linger | None = None
        self._next_receipt = 1
        self._mds = cfg.max_datagram_size
        self._path_mtu = path_mtu
        self._peer_mds: dict[str, int] = {}
        self._voids_out: set[tuple[str, int]] = set()  # VOIDs queued since the last output
        # Peer liveness: peers reported PeerUnreachable and not heard since (-> when reported).
        self._unreachable: dict[str, float] = {}
        self._peer_timeout = cfg.peer_timeout_s
        # Back-off stops at rto_max_s, or earlier so that a live peer gets at least
        # PEER_CHANCES transmissions to answer within peer_timeout_s.
        self._backoff_cap = (min(cfg.rto_max_s, cfg.peer_timeout_s / PEER_CHANCES)
                             if cfg.peer_timeout_s else cfg.rto_max_s)
        # Loss recovery state per peer, kept beyond its send records (bounded).
        self._paths: dict[str, PathRecovery] = {}
        self._ack_delay_us = int(cfg.ack_delay_s * 1_000_000)

    # ------------------------------------------------------------------ associations

    def associate(self, node_id: str, addr: Address) -> None:
        """Register the address of ``node_id`` by hand (traffic from it updates it later)."""
        wire.encode_id(node_id)
        self._addr[node_id] = addr
        self._peer_mds.pop(node_id, None)

    def address_of(self, node_id: str) -> Address | None:
        """The known (or discoverable) address of ``node_id``."""
        addr = self._addr.get(node_id)
        if addr is None and self._resolver is not None:
            addr = self._resolver(node_id)
            if addr is not None:
                self._addr[node_id] = addr
        return addr

    def announce(self, now: float) -> None:
        """Tell every peer we hold a record with where we are now (after a rebind).

        Peers learn a new address from any datagram; this sends each one a harmless frame at
        once instead of waiting for a retransmission or a probe: a probe from each receive
        record and a REQSLOTS(n=0) carrying ``l`` from each send record.
        """
        for rr in self._rr.values():
            self._emit(rr.peer, _SLOTS_PACK(_SLOTS, rr.sck, rr.rck, 0, self._ack_delay_us, 0))
        for sr in self._sr.values():
            self._emit(sr.peer, _REQSLOTS_PACK(_REQSLOTS, sr.sck, 0, sr.lowest_in_use(), 0))

    @property
    def clock(self) -> int:
        """The node clock ``ck`` (diagnostics)."""
        return self._clock.value

    @property
    def boot_clock(self) -> int:
        """The clock this incarnation started from: above every ``r`` an earlier one used."""
        return self._boot

    # ------------------------------------------------------------------ application side

    def can_send(self, dst: str, nbytes: int = 0) -> bool:
        """Whether ``send(dst, ...)`` would be admitted now by both windows."""
        if self._closing:
            return False
        if dst == self.id:
            return True
        rec = self._sr.get(dst)
        pend = rec.pending if rec is not None else 0
        return (pend < self.config.window_per_peer
                and self._pending_total < self.config.window_global)

    def in_flight(self) -> int:
        """Pieces queued or unacknowledged across all destinations."""
        return self._pending_total

    def send(self, dst: str, payload: bytes, now: float, receipt: bool = False) -> int | None:
        """Queue ``payload`` for exactly-once delivery to node ``dst``.

        Returns a receipt id when ``receipt`` is true (a :class:`ReceiptReady` event follows
        once ``dst`` acknowledged the whole message). Raises :class:`WouldBlock` when a window
        is full (retry after a :class:`Writable` event or an acknowledgement) and
        :class:`MessageTooLarge` above ``config.max_message_size``. Never drops.
        """
        if self._closing:
            raise Closed("the Exon node is closing")
        cfg = self.config
        size = len(payload)
        if size > cfg.max_message_size:
            raise MessageTooLarge(f"{size} bytes > max_message_size {cfg.max_message_size}")
        rid: int | None = None
        if receipt:
            rid = self._next_receipt
            self._next_receipt += 1
        if dst == self.id:
            self._deliver(dst, bytes(payload))
            if rid is not None:
                self._events.append(ReceiptReady(rid))
            return rid
        rec = self._sr.get(dst)
        if rec is None:
            if self._pending_total >= cfg.window_global:
                self._blocked = True
                raise WouldBlock("global send window full")
            if not dst or len(dst.encode("utf-8")) > wire.MAX_ID_BYTES:
                raise UsageError(f"bad node id {dst!r}")
            rec = SendRecord(dst, self._clock.value, self._path(dst), now)
            rec.max_single = self._limit(dst) - len(self._header(dst)) - wire.TOKEN_OVERHEAD
            self._sr[dst] = rec
            self.stats.send_records_created += 1
        elif (len(rec.queue) + len(rec.tokens) >= cfg.window_per_peer
              or self._pending_total >= cfg.window_global):
            self._blocked = True
            raise WouldBlock(f"send window to {dst!r} full")
        data = bytes(payload)
        if not rec.tokens and not rec.queue:
            rec.heard_at = now  # the record begins waiting on the peer: silence counts from here
        rec.idle_since = None
        if size <= rec.max_single:
            path = rec.path
            if not rec.queue and rec.env_lo < rec.sck and path.inflight < path.cwnd:
                # Fast path: an envelope is in hand, the window has room: out at once.
                s = rec.env_lo
                rec.env_lo = s + 1
                frame = _TOKEN_PACK(_TOKEN, 0, s, rec.rck, size) + data
                path.seq += 1
                rec.tokens[s] = (frame, rec.rck, rid, now, 1, path.seq)
                path.inflight += len(frame)
                self._pending_total += 1
                self._emit(dst, frame)
                self.stats.tokens_sent += 1
                rec.last_sent = now
                t = now + path.pto
                if t < rec.timer_at:
                    self._schedule(rec, t)
                if rec.sck - rec.env_lo < (cfg.slots_ahead >> 1) and not rec.req_out:
                    self._request_slots(rec, now)
                return rid
            rec.queue.append((data, None, rid))
            self._pending_total += 1
        else:
            chunk = rec.max_single - (wire.FRAGMENT_OVERHEAD - wire.TOKEN_OVERHEAD)
            count = -(-size // chunk)
            rec.queue.extend(Message(data, chunk, count, rid).pieces())
            self._pending_total += count
        self._pump(rec, now)
        return rid

    def next_event(self) -> Event | None:
        """The next event, or None."""
        return self._events.popleft() if self._events else None

    def drain_events(self) -> list[Event]:
        """Every pending event, oldest first (cheaper than looping on :meth:`next_event`)."""
        out = list(self._events)
        self._events.clear()
        return out

    def consumed(self, nbytes: int) -> None:
        """The application took ``nbytes`` of delivered payload: receive buffer space returns."""
        self._buffered = max(0, self._buffered - nbytes)
        if self._deferred and self._buffered < self.config.recv_buffer_bytes:
            for rec in list(self._deferred.values()):
                if rec.deferred is not None and rec.alive:
                    s, n = rec.deferred
                    rec.deferred = None
                    self._grant(rec, s, n)
            self._deferred = {p: r for p, r in self._deferred.items() if r.deferred is not None}

    @property
    def buffered_bytes(self) -> int:
        """Delivered payload bytes the application has not consumed yet (gauge)."""
        return self._buffered

    def close(self, now: float) -> None:
        """Begin a graceful close: refuse new sends; release each send record once idle;
        revoke the envelopes this node granted (REVOKE to each sender, no grant any more).

        Keep driving the protocol until :meth:`is_closed`: what was in flight both ways is
        delivered, and every sender confirmed it holds nothing bound to our records, so a new
        incarnation of this node (same id, clock store continued) loses nothing of theirs.
        """
        if self._closing:
            return
        self._closing = True
        self._ack_now = True
        self._revoke_until = now + self.config.close_revoke_timeout_s
        # REVOKE is retransmitted from the peer's RTO when we have measured one (its send
        # record's), else from rto_initial_s: on a lossy path the close waits a few RTTs, not
        # a few times rto_initial_s.
        rtos = {peer: rec.path.pto for peer, rec in self._sr.items()}
        for rec in list(self._sr.values()):
            if not rec.queue and not rec.tokens:
                self._release(rec, now)
            elif rec.silent:
                self.abandon(rec.peer, now)  # a peer already reported unreachable: give up
        initial = self.config.rto_initial_s
        for rr in list(self._rr.values()):
            rr.revoking = True
            rr.deferred = None
            self._emit(rr.peer, _REVOKE_PACK(_REVOKE, rr.rck))
            self.stats.revokes_sent += 1
            if rr.peer in self._unreachable:
                # Silent for peer_timeout_s already while it held messages of ours, and not
                # heard since: waiting close_revoke_timeout_s more for its REVOKED would only
                # delay the close. Given up at once, as at that timeout (its tokens bound to
                # this record get VOID from now on: reported, never lost silently).
                self.stats.revocations_abandoned += 1
                self._abandoned[rr.peer] = rr.rck
                self._discard_recv(rr, now)
                continue
            iv = rtos.get(rr.peer, initial)
            rr.probe_iv = iv
            rr.revoke_due = min(now + iv, self._revoke_until)
            self._schedule(rr, rr.revoke_due)
        self._deferred.clear()
        self._check_closed(now)

    def abandon(self, peer: str, now: float) -> int:
        """Give up on ``peer`` (typically after :class:`PeerUnreachable`): every message queued
        or in flight to it is reported, and its send record goes (its slots are released).

        A message any piece of which may have reached the peer (every fragment of it was bound
        to a slot) is reported :class:`OutcomeUnknown`: delivered at most once, maybe never. A
        message that never wholly left this node (queued without a slot, or a fragmented one
        some of whose fragments were never bound) is reported :class:`NotDelivered`: the peer
        cannot have delivered it. Nothing reported is ever sent again, so if the peer comes
        back (a partition that heals) each message is still delivered at most once; messages
        sent to it later go on fresh slots. Messages *from* the peer are not affected. Returns
        how many messages were reported (0: no send record to ``peer``). A closing node does
        this by itself for a peer reported unreachable (see ``ExonConfig.peer_timeout_s``).
        """
        rec = self._sr.get(peer)
        if rec is None:
            return 0
        reported = 0
        msgs: dict[int, Message] = {}
        for tok in rec.tokens.values():
            meta = tok[2]
            if isinstance(meta, Message):
                msgs[id(meta)] = meta
            else:
                self._unknown(peer, tok[0][wire.TOKEN_OVERHEAD:], meta)
                reported += 1
        for data, frag, meta in rec.queue:
            if frag is None:
                self._not_delivered(peer, data, meta)
                reported += 1
            else:
                msgs[id(meta)] = meta
        for msg in msgs.values():
            if msg.bound >= msg.count:
                self._unknown(peer, msg.data, msg.rid)  # every fragment went out
            else:
                self._not_delivered(peer, msg.data, msg.rid)  # never whole outside this node
            reported += 1
        self._pending_total -= len(rec.tokens) + len(rec.queue)
        rec.path.on_removed_bytes(sum(len(tok[0]) for tok in rec.tokens.values()))
        rec.tokens.clear()
        rec.queue.clear()
        rec.req_out = False
        self.stats.peers_abandoned += 1
        # The release tells the peer (if it hears it) to drop every slot it granted us: a copy
        # of an abandoned token still in the network is then ACKed without delivery, or was
        # delivered before it (at most once either way, as reported).
        self._release(rec, now)
        if self._closing:
            self._check_closed(now)
        if self._blocked:
            self._blocked = False
            self._events.append(Writable())
        return reported

    def unreachable_peers(self) -> list[str]:
        """Peers reported :class:`PeerUnreachable` and not heard from since (oldest first)."""
        return list(self._unreachable)

    @property
    def closing(self) -> bool:
        """:meth:`close` was called: ``send`` raises :class:`Closed`."""
        return self._closing

    def is_closed(self) -> bool:
        """After :meth:`close`: every send record delivered what it held and was released, and
        every sender to us confirmed our revocation (nothing of theirs is bound to our records).
        A sender that does not answer is waited for up to ``config.close_revoke_timeout_s``
        (and the caller's own timeout): it then sees our restart as a crash (outcome unknown,
        never a silent loss)."""
        return self._closing and not self._sr and not self._rr

    def is_finished(self) -> bool:
        """Closed, and the linger that follows is over: nothing is left to send or to time,
        so the host may stop driving the protocol (close its socket). Between
        :meth:`is_closed` and this, a host that keeps the protocol running (its socket open,
        datagrams fed, timers fired) answers its peers' late frames so that *their* close
        completes promptly (``config.close_linger_rtos``); stopping earlier is always safe: no
        message depends on it (docs/exon-wire.md, "Closing: the linger")."""
        return (self._closing and not self._sr and not self._rr and not self._out
                and not self._acks and self.next_timer() is None)

    def is_idle(self) -> bool:
        """No record, nothing queued or in flight, nothing waiting to be sent."""
        return not self._sr and not self._rr and not self._out and not self._acks

    def has_output(self) -> bool:
        """Whether :meth:`datagrams_to_send` has something to send now (ACKs that wait for a
        frame to ride with count from their deadline on, which :meth:`next_timer` gives)."""
        return bool(self._out) or (self._ack_now and bool(self._acks))

    def ack_deadline(self) -> float | None:
        """When the ACKs waiting for a frame to ride with leave on their own (None: none wait)."""
        return None if not self._acks or self._ack_due == INF else self._ack_due

    def record_counts(self) -> tuple[int, int]:
        """(send records, receive records) currently held."""
        return len(self._sr), len(self._rr)

    # ------------------------------------------------------------------ network side

    def receive_datagram(self, data: bytes | memoryview, addr: Address, now: float) -> None:
        """Process one datagram from ``addr``. Never raises on bad input: it is counted."""
        st = self.stats
        st.datagrams_in += 1
        st.bytes_in += len(data)
        try:
            src_b, dst_b, offset = wire.decode_header(data)
        except wire.WireError as exc:
            self._count_error(exc)
            return
        if dst_b != self._id_bytes:
            st.wrong_dst += 1
            return
        src = self._src_cache.get(src_b)
        if src is None:
            try:
                src = src_b.decode("utf-8")
            except UnicodeDecodeError:
                st.malformed += 1
                return
            if len(self._src_cache) > 4096:
                self._src_cache.clear()
            self._src_cache[src_b] = src
        if src == self.id:
            st.from_self += 1
            return
        frames, error = wire.decode_frames(data, offset, self.config.max_message_size)
        if error is not None:
            self._count_error(error)
        if not frames:
            return
        if self._addr.get(src) != addr:
            if src in self._addr:
                st.address_changes += 1
            self._addr[src] = addr
            self._peer_mds.pop(src, None)
        sr = self._sr.get(src)
        if sr is not None:
            sr.heard_at = now  # peer liveness: any valid datagram counts
        if self._unreachable and src in self._unreachable:
            self._heard_again(src)
        st.frames_in += len(frames)
        rr = self._rr.get(src)
        acks: dict[int, list[int]] | None = None
        push_event = self._events.append
        n_deliv = n_bytes = 0
        for f in frames:
            kind = f[0]
            if kind == _TOKEN:
                _, s, r, payload, index, count, total, flags = f
                if rr is None:
                    rr = self._rr.get(src)
                if rr is not None and rr.rck == r and rr.low <= s < rr.sck and s not in rr.dead:
                    if s == rr.low and not rr.dead:
                        rr.low = s + 1  # in-order arrival: the common case, inlined
                    else:
                        rr.consume(s)
                        self._ack_now = True  # a gap, or one filled: the sender is recovering
                    if flags & _FLAG_RETRANSMIT:
                        self._ack_now = True  # its first copy was taken for lost
                    rr.last_active = now
                    if count == 1:
                        push_event(Delivered(src, payload))
                        n_deliv += 1
                        n_bytes += len(payload)
                        self._buffered += len(payload)  # grants below look at it
                    else:
                        self._reassemble(rr, s, payload, index, count, total)
                    if rr.deferred is not None:
                        d_s, d_n = rr.deferred
                        rr.deferred = None
                        self._grant(rr, d_s, d_n)
                else:
                    if r < self._boot or (self._abandoned and self._abandoned.get(src) == r):
                        # A record of an earlier incarnation of this node, or one whose
                        # revocation was abandoned at close: it may or may not have delivered
                        # this token. Never ACK (that would turn an undelivered token into a
                        # silent loss): tell the sender it is gone.
                        self._void(src, r)
                        if self._linger is not None:
                            st.linger_answers += 1
                        continue
                    if r >= self._clock.value:
                        # Never one of our records (each r is taken from the clock): forged,
                        # or a later incarnation's while this one lingers. No answer.
                        st.stale_frames += 1
                        continue
                    # A record of this incarnation: the slot was consumed (delivered) or
                    # released, as a record is discarded only without live slots.
                    st.duplicates += 1
                    self._ack_now = True  # a retransmission: its ACK was lost or is late
                    if self._linger is not None:
                        st.linger_answers += 1
                if acks is None:
                    acks = self._acks.get(src)
                    if acks is None:
                        acks = self._acks[src] = {}
                    self._ack_dgrams += 1
                    if self._ack_dgrams >= 2 or not self._ack_delay:
                        self._ack_now = True
                    elif self._ack_due == INF:
                        self._ack_due = now + self._ack_delay
                lst = acks.get(r)
                if lst is None:
                    acks[r] = [s]
                else:
                    lst.append(s)
            elif kind == _ACK:
                self._on_ack(src, f[1], f[2], now)
            elif kind == _REQSLOTS:
                self._on_reqslots(src, f[1], f[2], f[3], f[4], now)
                rr = self._rr.get(src)
            elif kind == _SLOTS:
                self._on_slots(src, f[1], f[2], f[3], f[4], f[5], now)
            elif kind == _VOID:
                self._on_void(src, f[1], now)
            elif kind == _REVOKE:
                self._on_revoke(src, f[1], now)
            else:
                self._on_revoked(src, f[1], f[2], now)
                rr = self._rr.get(src)
        if n_deliv:
            st.delivered += n_deliv
            st.delivered_bytes += n_bytes

    def datagrams_to_send(self, now: float) -> list[tuple[bytes, Address]]:
        """Everything due now, packed into as few datagrams as fit ``max_datagram_size``."""
        if self._acks:
            if self._ack_now or now >= self._ack_due:
                self._flush_acks()
            elif self._out:
                self._flush_acks(self._out)  # they ride with frames that leave anyway
        if not self._out:
            return []
        if self._voids_out:
            self._voids_out.clear()
        result: list[tuple[bytes, Address]] = []
        st = self.stats
        for peer, frames in self._out.items():
            addr = self.address_of(peer)
            if addr is None:
                st.no_address += len(frames)
                continue
            limit = self._limit(peer)
            hdr = self._header(peer)
            st.frames_out += len(frames)
            buf = [hdr]
            size = len(hdr)
            for f in frames:
                lf = len(f)
                if size + lf > limit and len(buf) > 1:
                    result.append((b"".join(buf), addr))
                    buf = [hdr]
                    size = len(hdr)
                buf.append(f)
                size += lf
            result.append((b"".join(buf), addr))
        self._out.clear()
        st.datagrams_out += len(result)
        for d, _ in result:
            st.bytes_out += len(d)
        return result

    def next_timer(self) -> float | None:
        """The earliest deadline at which :meth:`handle_timer` has work, or None."""
        timers = self._timers
        while timers:
            t, _, rec = timers[0]
            if rec.alive and rec.timer_at == t:
                return t if t < self._ack_due else self._ack_due
            heapq.heappop(timers)
        return None if self._ack_due == INF else self._ack_due

    def handle_timer(self, now: float) -> None:
        """Run every timer due at ``now`` (retransmission, idle release, probes, ACKs)."""
        if now >= self._ack_due:
            self._ack_now = True
        timers = self._timers
        while timers and timers[0][0] <= now:
            t, _, rec = heapq.heappop(timers)
            if not rec.alive or rec.timer_at != t:
                continue
            rec.timer_at = INF
            if isinstance(rec, SendRecord):
                self._send_timer(rec, now)
            elif isinstance(rec, RecvRecord):
                self._recv_timer(rec, now)
            else:
                self._linger_timer(rec, now)
        if len(timers) > 64 and len(timers) > 4 * (len(self._sr) + len(self._rr)):
            self._timers = [e for e in timers if e[2].alive and e[2].timer_at == e[0]]
            heapq.heapify(self._timers)

    # ------------------------------------------------------------------ sender internals

    def _header(self, peer: str) -> bytes:
        hdr = self._headers.get(peer)
        if hdr is None:
            if len(self._headers) > 4096:
                self._headers.clear()
            hdr = self._headers[peer] = wire.encode_header(self.id, peer)
        return hdr

    def _limit(self, peer: str) -> int:
        """Largest datagram toward ``peer``: the path MTU hook's answer for its address."""
        v = self._peer_mds.get(peer)
        if v is None:
            v = self._mds
            if self._path_mtu is not None:
                addr = self.address_of(peer)
                if addr is None:
                    return v
                v = min(max(self._path_mtu(addr), 128), 65507)
            self._peer_mds[peer] = v
            if len(self._peer_mds) > 4096:
                self._peer_mds.clear()
        return v

    def _emit(self, peer: str, frame: bytes) -> None:
        out = self._out.get(peer)
        if out is None:
            self._out[peer] = [frame]
        else:
            out.append(frame)

    def _schedule(self, rec: _Timed, t: float) -> None:
        if t < rec.timer_at:
            rec.timer_at = t
            self._timer_seq += 1
            heapq.heappush(self._timers, (t, self._timer_seq, rec))

    def _path(self, peer: str) -> PathRecovery:
        """The loss-recovery state of the path to ``peer`` (kept beyond its send records, so a
        new record starts from what was measured before)."""
        path = self._paths.pop(peer, None)
        if path is None:
            cfg = self.config
            path = PathRecovery(cfg.rto_initial_s, cfg.ack_delay_s, self._backoff_cap,
                                self._limit(peer))
            if len(self._paths) >= MAX_PATHS:
                for old in [p for p in self._paths if p not in self._sr][:MAX_PATHS // 4]:
                    del self._paths[old]
        else:
            path.mds = self._limit(peer)
        path.inflight = 0  # a new record has nothing in flight
        path.largest_acked = path.seq
        path.pto_count = 0
        self._paths[peer] = path
        return path

    def path_stats(self, peer: str) -> dict[str, float] | None:
        """RTT, probe timeout and congestion window of the path to ``peer`` (diagnostics)."""
        path = self._paths.get(peer)
        return None if path is None else path.snapshot()

    def _pump(self, rec: SendRecord, now: float) -> None:
        """Bind queued pieces to envelopes while the congestion window has room, then keep
        envelopes coming."""
        queue = rec.queue
        path = rec.path
        if queue and rec.env_lo < rec.sck and path.inflight < path.cwnd:
            tokens = rec.tokens
            r = rec.rck
            s = rec.env_lo
            end = rec.sck
            cwnd = path.cwnd
            inflight = path.inflight
            seq = path.seq
            sent = 0
            while queue and s < end and inflight < cwnd:
                data, frag, meta = queue.popleft()
                if frag is None:
                    frame = _TOKEN_PACK(_TOKEN, 0, s, r, len(data)) + data
                else:
                    c = meta.chunk
                    i = frag[0] * c
                    data = meta.data[i:i + c]
                    if not meta.bound:
                        meta.r = r
                    meta.bound += 1
                    frame = (_TOKEN_PACK(_TOKEN, wire.FLAG_FRAGMENT, s, r, len(data))
                             + _FRAG_PACK(*frag) + data)
                seq += 1
                tokens[s] = (frame, r, meta, now, 1, seq)
                inflight += len(frame)
                self._emit(rec.peer, frame)
                s += 1
                sent += 1
            rec.env_lo = s
            path.seq = seq
            path.inflight = inflight
            self.stats.tokens_sent += sent
            rec.last_sent = now
            self._schedule(rec, now + path.pto)
        if not rec.req_out and (queue or rec.sck - rec.env_lo < (self.config.slots_ahead >> 1)):
            self._request_slots(rec, now)

    def _request_slots(self, rec: SendRecord, now: float) -> None:
        cfg = self.config
        have = rec.sck - rec.env_lo
        want = min(cfg.slots_ahead + len(rec.queue) - have, cfg.max_live_slots)
        if want <= 0:
            rec.req_out = False
            return
        end = rec.sck + want
        if end > rec.req_end:
            rec.req_end = end
        self._clock.cover(rec.req_end)  # a restarted node never reuses a slot we may hold
        if not rec.req_out:
            rec.req_out = True
            rec.req_tx = 1
        else:
            rec.req_tx += 1
        self._emit(rec.peer, _REQSLOTS_PACK(_REQSLOTS, rec.sck, want, rec.lowest_in_use(),
                                            _copy_no(rec.req_tx)))
        self.stats.reqslots_sent += 1
        rec.req_sent_at = now
        rec.last_sent = now
        self._schedule(rec, now + rec.path.pto)


    def _on_slots(self, src: str, s: int, r: int, n: int, ack_delay_us: int, echo: int,
                  now: float) -> None:
        rec = self._sr.get(src)
        if n == 0:
            # A receive record probing: tell it what it may drop.
            if rec is None:
                ck = self._clock.value
                self._emit(src, _REQSLOTS_PACK(_REQSLOTS, ck, 0, ck, 0))
            else:
                self._emit(src, _REQSLOTS_PACK(_REQSLOTS, rec.sck, 0, rec.lowest_in_use(), 0))
            return
        if rec is None:
            # Slots for a record we discarded: release them (our clock is above them).
            ck = self._clock.value
            self._emit(src, _REQSLOTS_PACK(_REQSLOTS, ck, 0, ck, 0))
            self.stats.stale_frames += 1
            return
        if s != rec.sck or r < rec.rck or r <= rec.closed_r:
            # Another range, or a record older than ours or revoked/voided (receive records
            # of one peer follow each other with growing r: an older one is gone).
            self.stats.stale_frames += 1
            return
        n = min(n, rec.req_end - s)
        if n <= 0:
            self.stats.stale_frames += 1
            return
        path = rec.path
        path.set_peer_ack_delay(min(ack_delay_us, 1_000_000) / 1_000_000)
        if rec.req_out and echo and echo == _copy_no(rec.req_tx):
            path.on_rtt_sample(now - rec.req_sent_at)  # the copy sent last was answered
        rec.req_out = False
        path.on_progress()
        if r != rec.rck:
            old = rec.rck
            rec.rck = r
            if old >= 0:
                # A new receive record: the one before it is gone, and its envelopes with it
                # (the receiver restarted; within one incarnation a record holding live slots
                # or a partial message is never discarded).
                rec.env_lo = s
                self._requeue_partial_head(rec, old)
        rec.sck = s + n
        self._pump(rec, now)

    def _on_ack(self, src: str, r: int, ranges: tuple[tuple[int, int], ...], now: float) -> None:
        rec = self._sr.get(src)
        if rec is None:
            return
        tokens = rec.tokens
        acked = 0
        nbytes = 0
        sample_at = -1.0
        newest = -1.0  # latest send time among the tokens this ACK covers
        largest = -1  # largest transmission sequence among them
        reordered = False
        path = rec.path
        prev_largest = path.largest_acked
        spurious = 0
        spurious_within = path.min_rtt / 2 if path.sampled else 0.0
        for first, count in ranges:
            end = first + count
            if count > 4 * len(tokens) + 8:
                slots: Any = []  # tokens are in slot order: stop past the range
                for x in tokens:
                    if x >= end:
                        break
                    if x >= first:
                        slots.append(x)
            else:
                slots = range(first, end)
            for s in slots:
                tok = tokens.get(s)
                if tok is not None and tok[1] == r:
                    del tokens[s]
                    acked += 1
                    nbytes += len(tok[0])
                    if tok[3] > newest:
                        newest = tok[3]
                    if tok[5] > largest:
                        largest = tok[5]
                    if tok[4] == 1:
                        if tok[3] > sample_at:
                            sample_at = tok[3]
                        if tok[5] < prev_largest:
                            reordered = True  # overtaken by a later transmission
                    elif now - tok[3] < spurious_within:
                        spurious += 1  # acked too soon after the copy: the first one was late
                    meta = tok[2]
                    if meta is not None:
                        self._receipt_progress(meta)
        if not acked:
            self.stats.stale_frames += 1
            return
        self._pending_total -= acked
        if rec.revoked >= 0:
            self._check_revoked(rec)
        if sample_at >= 0:
            path.on_rtt_sample(now - sample_at)
        if reordered:
            path.on_reordering()
        if spurious:
            path.on_spurious()
        path.on_progress()
        path.on_acked(nbytes, newest, now)
        if largest > path.largest_acked:
            path.largest_acked = largest
        if tokens:
            self._detect_losses(rec, now)
        if rec.queue:
            self._pump(rec, now)
        elif not tokens:
            rec.idle_since = now
            rec.loss_time = INF
            if self._closing:
                self._release(rec, now)
            else:
                self._schedule(rec, now + self.config.idle_release_s)
        if self._blocked:
            self._blocked = False
            self._events.append(Writable())

    def _detect_losses(self, rec: SendRecord, now: float) -> None:
        """Declare lost, and send again at once, each token acknowledged transmissions overtook
        (QUIC's packet threshold: one sent 3 transmissions later was acknowledged; or its
        time threshold: one sent later was acknowledged and it is older than 9/8 RTT); arm
        the loss timer for the next one that may become lost by time.

        Tokens are in slot order, and first transmissions go out in slot order: the scan
        stops at the first token sent for the first time after the largest acknowledged one
        (every later token was sent later still)."""
        path = rec.path
        largest = path.largest_acked
        threshold = path.packet_threshold
        delay = path.loss_delay()
        loss_time = INF
        lost: list[int] = []
        tokens = rec.tokens
        for s, tok in tokens.items():
            seq = tok[5]
            if seq > largest:
                if tok[4] == 1:
                    break
                continue
            t = tok[3] + delay  # (one expression for both tests: a timer due now must fire)
            if largest - seq >= threshold or t <= now:
                lost.append(s)
            elif t < loss_time:
                loss_time = t
        rec.loss_time = loss_time
        if lost:
            oldest = INF
            seq = path.seq
            emit = self._emit
            peer = rec.peer
            for s in lost:
                frame, r, meta, sent_at, tx, _ = tokens[s]
                if sent_at < oldest:
                    oldest = sent_at
                frame = _RETRANSMIT(frame)
                seq += 1
                tokens[s] = (frame, r, meta, now, tx + 1, seq)
                emit(peer, frame)
            path.seq = seq
            n = len(lost)
            self.stats.retransmits += n
            self.stats.fast_retransmits += n
            events = path.congestion_events
            path.on_lost(oldest, now)
            self.stats.congestion_events += path.congestion_events - events
            rec.last_sent = now
            self._schedule(rec, now + path.pto)
        if loss_time < rec.timer_at:
            self._schedule(rec, loss_time)

    def _receipt_progress(self, meta: Any) -> None:
        if isinstance(meta, int):
            self._events.append(ReceiptReady(meta))
            return
        meta.remaining -= 1
        if meta.remaining == 0 and meta.rid is not None:
            self._events.append(ReceiptReady(meta.rid))

    def _send_timer(self, rec: SendRecord, now: float) -> None:
        cfg = self.config
        path = rec.path
        tokens = rec.tokens
        if not tokens:
            rec.loss_time = INF  # (tokens may also leave by VOID, REVOKE or abandon)
        elif rec.loss_time <= now:
            self._detect_losses(rec, now)
        if tokens or rec.req_out:
            due = rec.last_sent + path.pto
            if now >= due:
                self._probe(rec, now)
                due = now + path.pto
            next_t = due
        else:
            next_t = INF
        if rec.loss_time < next_t:
            next_t = rec.loss_time
        if not tokens and not rec.queue:
            if rec.idle_since is None:
                rec.idle_since = now
            idle_due = rec.idle_since + cfg.idle_release_s
            if now >= idle_due or self._closing:
                self._release(rec, now)
                return
            next_t = min(next_t, idle_due)
        elif self._peer_timeout and not rec.silent:
            due = rec.heard_at + self._peer_timeout
            if now >= due:
                self._silent(rec, now)
                if not rec.alive:
                    return  # abandoned (the node is closing)
            elif due < next_t:
                next_t = due
        self._schedule(rec, next_t)

    def _probe(self, rec: SendRecord, now: float) -> None:
        """The probe timeout expired with nothing acknowledged since: send the oldest token or
        two again (their ACK, or the ACK of the copies it overtakes, tells which others were
        lost) and the slot request if one is out; the timeout doubles."""
        path = rec.path
        self.stats.probe_timeouts += 1
        if path.on_pto():
            self.stats.congestion_events += 1
        tokens = rec.tokens
        if tokens:
            seq = path.seq
            probes = []
            for s in tokens:
                probes.append(s)
                if len(probes) >= PROBE_TOKENS:
                    break
            for s in probes:
                frame, r, meta, _, tx, _ = tokens[s]
                frame = _RETRANSMIT(frame)
                seq += 1
                tokens[s] = (frame, r, meta, now, tx + 1, seq)
                self._emit(rec.peer, frame)
            path.seq = seq
            self.stats.retransmits += len(probes)
        if rec.req_out:
            self.stats.reqslots_retransmits += 1
            self._request_slots(rec, now)
        rec.last_sent = now

    def _release(self, rec: SendRecord, now: float) -> None:
        """Discard an idle send record, giving back every slot it holds or asked for."""
        end = max(rec.sck, rec.req_end)
        self._clock.advance_to(end)
        self._emit(rec.peer, _REQSLOTS_PACK(_REQSLOTS, end, 0, end, 0))
        if rec.revoked >= 0:
            self._emit(rec.peer, _REVOKED_PACK(_REVOKED, rec.revoked, 0))
        rec.alive = False
        del self._sr[rec.peer]
        self.stats.send_records_discarded += 1
        if self._closing:
            self._released.add(rec.peer)
            self._check_closed(now)

    # ------------------------------------------------------------------ restarts (sender side)

    def _on_void(self, src: str, r: int, now: float) -> None:
        """VOID r: the receiver restarted and records up to ``r`` are gone (an r below its boot
        clock is below it for good, so the fact is stable and may arrive late or twice).

        Envelopes of a gone record are dropped. A token bound to one may have been delivered
        by the incarnation that died (its ACK lost) or not: it is never sent again, and is
        reported as :class:`OutcomeUnknown`. A fragmented message some of whose fragments were
        never bound to that record cannot have been delivered: it is sent again, whole.
        """
        self.stats.voids_received += 1
        rec = self._sr.get(src)
        if rec is None or r <= rec.void_floor:
            self.stats.stale_frames += 1
            return
        rec.void_floor = r
        if r > rec.closed_r:
            rec.closed_r = r
        if rec.rck <= r:
            rec.env_lo = rec.sck
        tokens = rec.tokens
        dead = [s for s, tok in tokens.items() if tok[1] <= r]
        msgs: dict[int, Message] = {}
        for s in dead:
            tok = tokens.pop(s)
            rec.path.on_removed_bytes(len(tok[0]))
            meta = tok[2]
            if isinstance(meta, Message):
                msgs[id(meta)] = meta
            else:
                self._unknown(src, tok[0][wire.TOKEN_OVERHEAD:], meta)
        self._pending_total -= len(dead)
        for msg in msgs.values():
            if msg.bound >= msg.count:
                # Every fragment went to the dead record (all its tokens were just dropped):
                # that record may have delivered the message.
                self._unknown(src, msg.data, msg.rid)
            else:
                self._requeue(rec, msg)
        self._requeue_partial_head(rec, r)
        rec.path.on_progress()  # the peer answers: ask its new incarnation for slots at once
        if rec.req_out:
            self._request_slots(rec, now)
        self._after_removal(rec, now)

    def _on_revoke(self, src: str, r: int, now: float) -> None:
        """REVOKE r: the receiver is closing. Drop our envelopes of ``r``, bind nothing more to
        it, answer how many tokens bound to ``r`` we still hold (the receiver keeps delivering
        those), and REVOKED(r, 0) again once they are all acknowledged."""
        self.stats.revokes_received += 1
        rec = self._sr.get(src)
        if rec is None:
            if self._closing:
                # We hold nothing at all. Closing (lingering, perhaps while our next
                # incarnation already runs), answer with a release at our clock rather than
                # REVOKED(r, 0): it ends the revoking record if we are the sender it granted
                # (every slot we ever asked of it is below our clock) and leaves any later
                # incarnation's record alone (its slots are above our clock).
                ck = self._clock.value
                self._emit(src, _REQSLOTS_PACK(_REQSLOTS, ck, 0, ck, 0))
                if self._linger is not None:
                    self.stats.linger_answers += 1
            else:
                self._emit(src, _REVOKED_PACK(_REVOKED, r, 0))  # we hold nothing at all
            return
        if r > rec.closed_r:
            rec.closed_r = r
        if rec.rck == r:
            rec.env_lo = rec.sck
        # A message cut in two by the revocation can never be whole at this record.
        self._requeue_partial_head(rec, r)
        held = sum(1 for tok in rec.tokens.values() if tok[1] == r)
        self._emit(src, _REVOKED_PACK(_REVOKED, r, held))
        if held and r == rec.rck:
            rec.revoked = r
        elif rec.revoked == r:
            rec.revoked = -1
        self._after_removal(rec, now)

    def _check_revoked(self, rec: SendRecord) -> None:
        """After an ACK: the last token bound to a revoked record is acknowledged -> tell it."""
        r = rec.revoked
        for tok in rec.tokens.values():
            if tok[1] == r:
                return
        rec.revoked = -1
        self._emit(rec.peer, _REVOKED_PACK(_REVOKED, r, 0))

    def _requeue_partial_head(self, rec: SendRecord, r: int) -> None:
        """The message at the head of the queue, if fragments of it were bound to record
        ``r`` (or an older one) that is now gone or revoked, was not delivered (it was never
        whole there): send it again, whole, on fresh slots."""
        queue = rec.queue
        if queue:
            meta = queue[0][2]
            if isinstance(meta, Message) and meta.bound and meta.r <= r:
                self._requeue(rec, meta)

    def _drop_message(self, rec: SendRecord, msg: Message) -> None:
        """Forget every token and queued piece of ``msg``."""
        tokens = rec.tokens
        mine = [s for s, tok in tokens.items() if tok[2] is msg]
        for s in mine:
            rec.path.on_removed_bytes(len(tokens.pop(s)[0]))
        queue = rec.queue
        n = len(mine)
        while queue and queue[0][2] is msg:  # unbound pieces follow the bound ones, in order
            queue.popleft()
            n += 1
        self._pending_total -= n

    def _requeue(self, rec: SendRecord, msg: Message) -> None:
        """Send ``msg`` again, whole, ahead of the queue (it is proven undelivered)."""
        self._drop_message(rec, msg)
        msg.bound = 0
        msg.remaining = msg.count
        msg.r = -1
        rec.queue.extendleft(reversed(msg.pieces()))
        self._pending_total += msg.count
        self.stats.resent_whole += 1

    def _unknown(self, dst: str, payload: bytes, rid: Any) -> None:
        self._events.append(OutcomeUnknown(dst, bytes(payload), rid))
        self.stats.outcome_unknown += 1

    def _not_delivered(self, dst: str, payload: bytes, rid: Any) -> None:
        self._events.append(NotDelivered(dst, bytes(payload), rid))
        self.stats.not_delivered += 1

    # ------------------------------------------------------------------ peer liveness

    def _silent(self, rec: SendRecord, now: float) -> None:
        """``rec`` waits on its peer and nothing was heard from it for ``peer_timeout_s``:
        report it (once for this record, until the peer is heard again). Nothing is dropped;
        a closing node gives the peer up (its close would otherwise wait for ever)."""
        rec.silent = True
        peer = rec.peer
        unreachable = self._unreachable
        unreachable.pop(peer, None)
        unreachable[peer] = now
        if len(unreachable) > MAX_UNREACHABLE:
            oldest = next(iter(unreachable))
            del unreachable[oldest]
            other = self._sr.get(oldest)
            if other is not None:
                other.silent = False
        self._events.append(PeerUnreachable(peer, now - rec.heard_at))
        self.stats.peers_unreachable += 1
        if self._closing:
            self.abandon(peer, now)

    def _heard_again(self, src: str) -> None:
        """A datagram from a peer reported unreachable."""
        del self._unreachable[src]
        rec = self._sr.get(src)
        if rec is not None:
            rec.silent = False
        self._events.append(PeerReachable(src))
        self.stats.peers_reachable += 1

    def _after_removal(self, rec: SendRecord, now: float) -> None:
        """Tokens left the record without an ACK (void, revoke): pump, go idle, unblock."""
        if not rec.alive:
            return
        if rec.queue:
            self._pump(rec, now)
        elif not rec.tokens:
            if rec.idle_since is None:
                rec.idle_since = now
            if self._closing:
                self._release(rec, now)
            else:
                self._schedule(rec, rec.idle_since + self.config.idle_release_s)
        if self._blocked:
            self._blocked = False
            self._events.append(Writable())

    # ------------------------------------------------------------------ receiver internals

    def _void(self, src: str, r: int) -> None:
        """Tell ``src`` that record ``r`` (below our boot clock) is gone: once per output."""
        key = (src, r)
        if key in self._voids_out:
            return
        self._voids_out.add(key)
        self._emit(src, _VOID_PACK(_VOID, r))
        self.stats.voids_sent += 1

    def _on_revoked(self, src: str, r: int, held: int, now: float) -> None:
        """REVOKED(r, held): with ``held == 0`` the sender holds nothing bound to our record
        ``r`` and never will: the record can go (this is what a closing node waits for)."""
        rec = self._rr.get(src)
        if rec is None or rec.rck != r or not rec.revoking:
            self.stats.stale_frames += 1
            return
        if held == 0:
            self._discard_recv(rec, now)

    def _deliver(self, src: str, payload: bytes) -> None:
        self._events.append(Delivered(src, payload))
        self._buffered += len(payload)
        st = self.stats
        st.delivered += 1
        st.delivered_bytes += len(payload)

    def _reassemble(self, rec: RecvRecord, s: int, payload: bytes, index: int, count: int,
                    total: int) -> None:
        first = s - index
        entry = rec.reasm.get(first)
        if entry is None:
            entry = rec.reasm[first] = Reassembly(count, total)
        if entry.count != count or entry.total != total or index in entry.parts:
            self.stats.reassembly_errors += 1
            return
        entry.parts[index] = payload
        entry.size += len(payload)
        if entry.size > total:
            self.stats.reassembly_errors += 1
            del rec.reasm[first]
            return
        if len(entry.parts) == count:
            del rec.reasm[first]
            if entry.size != total:
                self.stats.reassembly_errors += 1
                return
            parts = entry.parts
            self._deliver(rec.peer, b"".join(parts[i] for i in range(count)))

    def _on_reqslots(self, src: str, s: int, n: int, low: int, copy: int,
                     now: float) -> None:
        rec = self._rr.get(src)
        if self._closing:
            # No new record, no grant: the sender's messages wait for our next incarnation.
            # A revoking record still applies l. It ends on REVOKED(r, 0), or on an l at or
            # above its grant end: the sender will never use a slot of ours again, so it holds
            # no token bound to the record (a release says so when the sender goes idle).
            if rec is not None:
                rec.drop_below(low)
                if low >= rec.sck:
                    self._discard_recv(rec, now)
            return
        if rec is None:
            if n == 0:
                return  # a release for a record already gone
            rec = RecvRecord(src, self._clock.take(), s, now, self.config.probe_interval_s)
            self._rr[src] = rec
            self.stats.recv_records_created += 1
            self._schedule(rec, now + rec.probe_iv)
        rec.last_active = now
        rec.probe_iv = self.config.probe_interval_s
        rec.drop_below(low)
        if rec.reasm:
            # A partial message all of whose slots are below the live range or below l (the
            # sender never uses a slot below l again, and a later message of its starts at or
            # above l, so it cannot join this one) can never be completed: the sender gave it
            # up (abandon) or sent it again whole. Forget it, or the record would stay.
            bound = max(rec.low, low)
            for first in [f for f, e in rec.reasm.items() if f + e.count <= bound]:
                del rec.reasm[first]
        if n:
            self._grant(rec, s, n, copy)
            if rec.deferred is not None:
                # Deferred (our buffers are full): answer with a probe all the same, so the
                # sender, whose messages wait for these slots, hears we are alive (peer
                # liveness) and tells us its l again. At most one per request it sends.
                self._emit(src, _SLOTS_PACK(_SLOTS, rec.sck, rec.rck, 0, self._ack_delay_us, 0))
        else:
            d = rec.deferred
            if d is not None and low >= d[0] + d[1]:
                # A release (l at or above the end of the deferred request; a waiting
                # sender's answer to our probe has l <= its s): it wants none of those slots.
                rec.deferred = None
                self._deferred.pop(src, None)
            if rec.low >= rec.sck and not rec.reasm and rec.deferred is None:
                self._discard_recv(rec, now)

    def _grant(self, rec: RecvRecord, s: int, n: int, copy: int = 0) -> None:
        """Answer REQSLOTS(s, n): grant ``[s, s+m)``, all live, or defer while buffers are full."""
        if self._closing:
            return  # revoked: nothing more is granted
        if s < rec.low or (rec.dead and s < rec.sck and max(rec.dead) >= s):
            self.stats.stale_frames += 1  # an old request: the sender has moved past it
            return
        cfg = self.config
        if s > rec.sck:
            # The sender starts above our range (its clock moved on): slots in the gap were
            # never granted, so they must not become live.
            if rec.low >= rec.sck:
                rec.low = rec.sck = s
                rec.dead.clear()
            elif s - rec.sck <= cfg.max_live_slots:
                rec.dead.update(range(rec.sck, s))
                rec.sck = s
            else:
                self.stats.stale_frames += 1
                return
        end = min(s + n, rec.low + cfg.max_live_slots)
        if self._buffered >= cfg.recv_buffer_bytes or end <= s:
            if rec.deferred is None:
                self.stats.grants_deferred += 1
            rec.deferred = (s, n)
            if self._buffered >= cfg.recv_buffer_bytes:
                self._deferred[rec.peer] = rec
            return
        if end > rec.sck:
            rec.sck = end
        self._emit(rec.peer, _SLOTS_PACK(_SLOTS, s, rec.rck, end - s, self._ack_delay_us, copy))

    def _recv_timer(self, rec: RecvRecord, now: float) -> None:
        if rec.revoking:
            if now < rec.revoke_due:
                self._schedule(rec, rec.revoke_due)
                return
            if now >= self._revoke_until:
                self.stats.revocations_abandoned += 1  # the sender is gone, or too slow
                self._abandoned[rec.peer] = rec.rck  # from now on its tokens get VOID
                self._discard_recv(rec, now)
                return
            self._emit(rec.peer, _REVOKE_PACK(_REVOKE, rec.rck))  # REVOKE or REVOKED was lost
            self.stats.revokes_sent += 1
            rec.probe_iv = min(rec.probe_iv * 2, self.config.rto_max_s)
            rec.revoke_due = min(now + rec.probe_iv, self._revoke_until)
            self._schedule(rec, rec.revoke_due)
            return
        due = rec.last_active + rec.probe_iv
        if now < due:
            self._schedule(rec, due)
            return
        if rec.low >= rec.sck and not rec.reasm and rec.deferred is None:
            self._discard_recv(rec, now)
            return
        self._emit(rec.peer, _SLOTS_PACK(_SLOTS, rec.sck, rec.rck, 0, self._ack_delay_us, 0))
        self.stats.probes_sent += 1
        rec.last_active = now
        rec.probe_iv = min(rec.probe_iv * 2, self.config.probe_interval_max_s)
        self._schedule(rec, now + rec.probe_iv)

    def _discard_recv(self, rec: RecvRecord, now: float) -> None:
        rec.alive = False
        del self._rr[rec.peer]
        self._deferred.pop(rec.peer, None)
        self.stats.recv_records_discarded += 1
        if self._closing:
            self._check_closed(now)

    # ------------------------------------------------------------------ closing: the linger

    def _check_closed(self, now: float) -> None:
        """On the step that makes :meth:`is_closed` true: start the linger."""
        if self._linger is not None or self._sr or self._rr:
            return
        cfg = self.config
        self._linger = lg = _Linger(now + cfg.close_linger_s, cfg.rto_initial_s)
        if lg.end > now:
            self._schedule(lg, min(now + lg.iv, lg.end))

    def _linger_timer(self, lg: _Linger, now: float) -> None:
        """While lingering, send our releases again (backing off): a lost one would leave the
        peer's receive record with live slots, and its own close waiting for our answer."""
        if now >= lg.end:
            lg.alive = False
            return
        ck = self._clock.value
        for peer in self._released:
            self._emit(peer, _REQSLOTS_PACK(_REQSLOTS, ck, 0, ck, 0))
        lg.iv *= 2
        self._schedule(lg, min(now + lg.iv, lg.end))

    def _flush_acks(self, only: Any = None) -> None:
        """Emit the pending ACKs (of the peers in ``only``, when given: piggybacking)."""
        acks = self._acks
        peers = list(acks) if only is None else [p for p in only if p in acks]
        for peer in peers:
            per_r = acks.pop(peer)
            budget = min(self._limit(peer), self._mds) - 300  # room for the header
            max_ranges = max(1, (budget - wire.ACK_S.size) // _RANGE_SIZE)
            for r, slots in per_r.items():
                if len(slots) == 1:
                    self._emit(peer, wire.encode_ack(r, ((slots[0], 1),)))
                    continue
                ranges = wire.to_ranges(slots)
                for i in range(0, len(ranges), max_ranges):
                    self._emit(peer, wire.encode_ack(r, ranges[i:i + max_ranges]))
        if not acks:
            self._ack_due = INF
            self._ack_now = self._closing
            self._ack_dgrams = 0

    def _count_error(self, exc: wire.WireError) -> None:
        if exc.kind == "truncated":
            self.stats.truncated += 1
        else:
            self.stats.malformed += 1
