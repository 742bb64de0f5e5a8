"""The state every part of :class:`~a3m.exon.protocol.ExonProtocol` shares, and the helpers
they all use: the records, the output queues, the timer heap, the associations.

``ExonProtocol`` is composed of parts, one module each, stacked in one line of single
inheritance: :class:`ProtocolState` <- sender <- receiver <- restarts <- closing <- liveness <-
``ExonProtocol`` (single inheritance is what lets mypyc compile them into native classes,
``docs/performance.md``, "The compiled fast path"). A part calls only the shared state and the
parts below it directly; the stubs at the end of :class:`ProtocolState` are the calls it makes
into a part above it.
"""

from __future__ import annotations

import heapq
import os
from collections import deque
from collections.abc import Callable, Hashable
from dataclasses import dataclass, fields
from random import Random
from typing import Any, Final

from a3m.exon import wire
from a3m.exon.clock import ClockStore, MemoryClockStore, NodeClock
from a3m.exon.config import ExonConfig
from a3m.exon.discovery import Resolver
from a3m.exon.events import Event
from a3m.exon.pacer import FirstProbePacer
from a3m.exon.records import INF, RecvRecord, SendRecord
from a3m.exon.recovery import PathRecovery
from a3m.exon.secure import NodeKey, SecureLayer, TrustStore

Address = Hashable

# Final: the compiled build reads these as C constants, not from the module's dict at each use.
_TOKEN: Final = wire.TOKEN
_ACK: Final = wire.ACK
_REQSLOTS: Final = wire.REQSLOTS
_SLOTS: Final = wire.SLOTS
_VOID: Final = wire.VOID
_REVOKE: Final = wire.REVOKE
_REVOKED: Final = wire.REVOKED
_TOKEN_PACK: Final = wire.TOKEN_S.pack
_TOKEN_FRAG_PACK: Final = wire.TOKEN_FRAG_S.pack
_REQSLOTS_PACK: Final = wire.REQSLOTS_S.pack
_SLOTS_PACK: Final = wire.SLOTS_S.pack
_VOID_PACK: Final = wire.VOID_S.pack
_REVOKE_PACK: Final = wire.REVOKE_S.pack
_REVOKED_PACK: Final = wire.REVOKED_S.pack
_RANGE_SIZE: Final = wire.RANGE_S.size
_RETRANSMIT: Final = wire.as_retransmission
_FLAG_RETRANSMIT: Final = wire.FLAG_RETRANSMIT
_FLAG_FRAGMENT: Final = wire.FLAG_FRAGMENT
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
    spurious_retransmits: int = 0  # tokens sent again whose first copy arrived (or seemed to)
    probe_timeouts: int = 0  # probe timeouts expired (each sends a probe or two)
    probe_copies: int = 0  # probes whose oldest frame went twice (the copy alone)
    probes_deferred: int = 0  # first-exchange probes and resends that waited for the pace
    congestion_events: int = 0  # window reductions (one per round at most)
    pacer_holds: int = 0  # times the pacer held queued tokens back (till its timer or an ACK)
    reqslots_sent: int = 0
    reqslots_retransmits: int = 0
    slot_stalls: int = 0  # grants that found the sender out of envelopes with pieces queued
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
    # Secure associations (docs/exon-wire.md, "Secure associations"); every one of these
    # datagrams is dropped without effect:
    plain_refused: int = 0  # datagrams in clear at a secure node
    secure_refused: int = 0  # secure-layer datagrams at a node that opted out
    unknown_session: int = 0  # sealed for no session of ours (an old incarnation, forged)
    forged: int = 0  # do not authenticate under the session they name
    replayed: int = 0  # a counter seen before (or older than the replay window)
    spoofed: int = 0  # authenticated, but naming another node as source
    old_path_datagrams: int = 0  # authenticated from a new address, but reordered: no move
    path_challenges: int = 0  # challenges sent to a new address (resends included)
    paths_validated: int = 0  # addresses that answered: traffic moved there
    paths_abandoned: int = 0  # candidate addresses that never answered
    amplification_limited: int = 0  # datagrams kept off an unproven address (3x budget)
    sealed_dropped: int = 0  # datagrams dropped while a handshake was pending (queue full)
    handshakes_started: int = 0
    handshakes_completed: int = 0  # as initiator
    handshakes_accepted: int = 0  # as responder
    hellos_answered: int = 0
    welcomes_repeated: int = 0  # HELLOs sent again, answered with their WELCOME (no key exchange)
    hello_resends: int = 0
    initiate_resends: int = 0
    retries_sent: int = 0  # HELLOs answered with an address token (busy)
    unauth_shed: int = 0  # handshake datagrams dropped unread: their source's budget or the
    # RETRY budget was spent (docs/exon-wire.md, "Under load")
    data_first: int = 0  # sealed datagrams of live sessions taken ahead of others in a batch
    retries_received: int = 0
    token_invalid: int = 0
    cookie_invalid: int = 0  # forged, replayed from another address, or too old
    handshake_failed: int = 0  # did not authenticate or decode
    handshake_repeats: int = 0  # INITIATE again for a session already made
    unexpected_handshakes: int = 0  # WELCOME or RETRY for no handshake of ours
    key_refused: int = 0  # KeyRefused events
    sessions_full: int = 0
    sessions_expired: int = 0
    handshakes_abandoned: int = 0
    peer_restarts: int = 0  # a handshake from a new incarnation ended the old sessions

    def as_dict(self) -> dict[str, int]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


class ProtocolState:
    """What the parts of the protocol share (no rule of the protocol lives here)."""

    def __init__(
        self,
        node_id: str,
        config: ExonConfig | None = None,
        rng: Random | None = None,
        clock_store: ClockStore | None = None,
        resolver: Resolver | None = None,
        path_mtu: Callable[[Address], int] | None = None,
        key: NodeKey | None = None,
        entropy: Callable[[int], bytes] | None = None,
        trust: TrustStore | None = None,
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
        #: The header of the last datagram read whose source was decoded, and that source:
        #: the next datagram that starts with the same bytes comes from it (a stream's do).
        self._rx_hdr = b""
        self._rx_src = ""
        self._out: dict[str, list[bytes]] = {}
        self._acks: dict[str, dict[int, list[int]]] = {}
        #: Send records acknowledged by the datagram being read, with the largest
        #: transmission it acknowledged and when that was sent (-1: no sample): the largest
        #: moves, the RTT sample is taken and losses are detected once the whole datagram is
        #: read (an ACK too long for one frame comes as several, and a retransmitted token in
        #: the first must not make the tokens the next one acknowledges look lost).
        self._ack_detect: dict[SendRecord, tuple[int, float]] = {}
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
        #: Frames sent once more in a datagram of their own (a probe's second copy).
        self._solo: list[tuple[str, bytes]] = []
        # Peer liveness: peers reported PeerUnreachable and not heard since (-> when reported).
        self._unreachable: dict[str, float] = {}
        self._peer_timeout = cfg.peer_timeout_s
        # Back-off stops at rto_max_s, or earlier so that a live peer gets at least
        # PEER_CHANCES transmissions to answer within peer_timeout_s.
        self._backoff_cap = (min(cfg.rto_max_s, cfg.peer_timeout_s / PEER_CHANCES)
                             if cfg.peer_timeout_s else cfg.rto_max_s)
        # Loss recovery state per peer, kept beyond its send records (bounded).
        self._paths: dict[str, PathRecovery] = {}
        #: The node-wide pace of first exchanges' probes (Exon's and the handshakes').
        self._pacer = FirstProbePacer(cfg.first_probe_rate)
        self._ack_delay_us = int(cfg.ack_delay_s * 1_000_000)
        # Secure associations (a3m.exon.secure), unless the config opts out.
        self._sec: SecureLayer | None = None
        if cfg.secure:
            entropy = entropy or os.urandom
            self._sec = SecureLayer(
                node_id, key or NodeKey.generate(entropy),
                trust or TrustStore(cfg.trust, getattr(resolver, "public_key", None)),
                entropy, self.stats, self._events, self._path_proven,
                handshake_rate=cfg.handshake_rate, rekey_after_s=cfg.rekey_after_s,
                idle_s=cfg.session_idle_s, backoff_cap_s=self._backoff_cap,
                timeout_s=cfg.rto_initial_s, retry_rate=cfg.retry_rate,
                on_session=self._session_ready, pacer=self._pacer, rtt_of=self.peer_pto)

    @property
    def secure(self) -> SecureLayer | None:
        """The secure layer (None: this node opted out)."""
        return self._sec

    def _path_proven(self, peer: str, addr: Address) -> None:
        """The secure layer proved ``peer`` is at ``addr``: send there from now on."""
        if self._addr.get(peer) != addr:
            if peer in self._addr:
                self.stats.address_changes += 1
            self._addr[peer] = addr
            self._peer_mds.pop(peer, None)

    def address_of(self, node_id: str) -> Address | None:
        """The known (or discoverable) address of ``node_id``."""
        addr = self._addr.get(node_id)
        if addr is None and self._resolver is not None:
            addr = self._resolver(node_id)
            if addr is not None:
                self._addr[node_id] = addr
        return addr

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
        """Make ``rec``'s timer fire by ``t`` (an earlier deadline already set stays)."""
        if t < rec.timer_at:
            rec.timer_at = t
            self._timer_seq += 1
            heapq.heappush(self._timers, (t, self._timer_seq, rec))

    def _reschedule(self, rec: _Timed, t: float) -> None:
        """Move ``rec``'s timer to ``t``, later as well as earlier (the entry for the old time
        goes stale and is skipped): a deadline that no longer has work must not wake the
        runtime for nothing."""
        if t != rec.timer_at:
            rec.timer_at = t
            self._timer_seq += 1
            heapq.heappush(self._timers, (t, self._timer_seq, rec))

    def _count_error(self, exc: wire.WireError) -> None:
        if exc.kind == "truncated":
            self.stats.truncated += 1
        else:
            self.stats.malformed += 1

    # ------------------------------------------------------------------ calls between parts

    def _after_removal(self, rec: SendRecord, now: float) -> None:
        raise NotImplementedError  # (a part of ExonProtocol defines it)

    def _check_closed(self, now: float) -> None:
        raise NotImplementedError  # (a part of ExonProtocol defines it)

    def _session_ready(self, peer: str, now: float, held: bool) -> None:
        raise NotImplementedError  # (a part of ExonProtocol defines it)

    def _check_revoked(self, rec: SendRecord) -> None:
        raise NotImplementedError  # (a part of ExonProtocol defines it)

    def _deliver(self, src: str, payload: bytes) -> None:
        raise NotImplementedError  # (a part of ExonProtocol defines it)

    def _discard_recv(self, rec: RecvRecord, now: float) -> None:
        raise NotImplementedError  # (a part of ExonProtocol defines it)

    def _not_delivered(self, dst: str, payload: bytes, rid: Any) -> None:
        raise NotImplementedError  # (a part of ExonProtocol defines it)

    def _pump(self, rec: SendRecord, now: float) -> None:
        raise NotImplementedError  # (a part of ExonProtocol defines it)

    def _release(self, rec: SendRecord, now: float) -> None:
        raise NotImplementedError  # (a part of ExonProtocol defines it)

    def _request_slots(self, rec: SendRecord, now: float) -> bytes | None:
        raise NotImplementedError  # (a part of ExonProtocol defines it)

    def _requeue_partial_head(self, rec: SendRecord, r: int) -> None:
        raise NotImplementedError  # (a part of ExonProtocol defines it)

    def _silent(self, rec: SendRecord, now: float) -> None:
        raise NotImplementedError  # (a part of ExonProtocol defines it)

    def _unknown(self, dst: str, payload: bytes, rid: Any) -> None:
        raise NotImplementedError  # (a part of ExonProtocol defines it)

    def abandon(self, peer: str, now: float) -> int:
        raise NotImplementedError  # (a part of ExonProtocol defines it)

    def next_timer(self) -> float | None:
        raise NotImplementedError  # (a part of ExonProtocol defines it)

    def peer_pto(self, peer: str) -> float:
        raise NotImplementedError  # (a part of ExonProtocol defines it)

    def _exon_timer(self) -> float | None:
        raise NotImplementedError  # (a part of ExonProtocol defines it)
