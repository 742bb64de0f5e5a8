"""The state the parts of :class:`~a3m.exon.secure.layer.SecureLayer` share: the sessions by
peer and by index, the handshakes this node started, the control output, the timer heap, and
the steps every part takes on them (seal a control packet, install or drop a session, arm a
timer).

The layer is composed as Exon's protocol is (``exon/state.py``): one line of single
inheritance, :class:`SecureState` <- :class:`~a3m.exon.secure.paths.PathsPart` (mobility) <-
:class:`~a3m.exon.secure.initiator.InitiatorPart` (handshakes this node starts) <-
:class:`~a3m.exon.secure.responder.ResponderPart` (handshakes peers start, and their budgets)
<- :class:`~a3m.exon.secure.layer.SecureLayer` (the dispatcher: open, seal, timers), which
is what lets mypyc compile them into native classes.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Callable, Hashable
from typing import Any, Final

from a3m.exon.events import Event, PeerRestarted
from a3m.exon.pacer import FirstProbePacer
from a3m.exon.recovery import UNSAMPLED_STEADY_PTOS
from a3m.exon.secure import packets as p
from a3m.exon.secure.cookies import COOKIE_LIFETIME_S, CookieJar, new_cookie_keys
from a3m.exon.secure.keys import NodeKey
from a3m.exon.secure.meter import HANDSHAKE_BURST_S, new_meter
from a3m.exon.secure.noise import SymmetricState
from a3m.exon.secure.session import INF, Session, new_session_table
from a3m.exon.secure.trust import TrustStore

Address = Hashable

#: The first HELLO, INITIATE and path-challenge resend when the config does not say
#: (``rto_initial_s``, the first exchange's probe timeout); each later one doubles it.
HANDSHAKE_TIMEOUT_S = 0.2
#: A pending handshake nothing was queued on for this long is given up (as long as a cookie
#: lives: a WELCOME can take that long to come back).
HANDSHAKE_GIVE_UP_S = COOKIE_LIFETIME_S
#: A session on which we sent UNANSWERED_REHANDSHAKE datagrams without hearing anything under
#: it for this long (or 4 handshake round trips, if longer) gets a new handshake: the peer may
#: have restarted and forgotten it (its datagrams would be refused).
SILENCE_REHANDSHAKE_S: Final = 1.0
UNANSWERED_REHANDSHAKE: Final = 4
#: A silence that made a new handshake and found the same incarnation (the peer was slow, not
#: restarted: a loaded node's queue) doubles the silence the next session waits, up to this.
MAX_SILENCE_S = 8.0
#: Before a round trip to the peer is known, HELLO and INITIATE are resent every
#: ``timeout_s`` this many times before the interval doubles, as Exon's probes before an RTT
#: sample (recovery.UNSAMPLED_STEADY_PTOS): a handshake needs two datagrams through in one
#: attempt (p = 0.42 at 35 % loss each way), and with the interval doubling from the first
#: resend the slowest of 200 simulated first links took 20 s. The packets are small and the
#: responder's work on them is budgeted (SOURCE_RATE).
FAST_TRIES = UNSAMPLED_STEADY_PTOS
#: Path challenges sent before a candidate address is given up.
CHALLENGE_TRIES = 5
#: Exon datagrams held per peer while its handshake runs (the oldest is dropped beyond it;
#: Exon retransmits what it does not see acknowledged).
MAX_QUEUED = 256
#: ... and at most this many bytes of them (loopback datagrams reach 64 KiB).
MAX_QUEUED_BYTES = 1 << 20
#: Sessions held in all; beyond it new handshakes are refused (counted).
MAX_SESSIONS = 65536
#: Handshakes this node started and that are still pending, in all.
MAX_PENDING = 65536
#: Addresses that proved themselves (a HELLO with a valid RETRY token) stay proven this
#: long, and at most this many are remembered (all forgotten beyond).
PROVEN_S = COOKIE_LIFETIME_S
MAX_PROVEN = 65536
#: Key exchanges a second for HELLOs whose RETRY token proved their address, in all (a 0.1 s
#: burst): no per-source budget holds them, only this bound on the CPU they may take (a
#: responder's key exchanges cost ~0.3 ms: about half a core). A token replayed is refused
#: nothing more than this.
PROVEN_RATE = 2000.0
#: A HELLO sent again (the same bytes from the same address: its WELCOME was lost, or is
#: still in the responder's queue behind a busy node) within this long gets the WELCOME made
#: for it again, not a second key exchange; at most MAX_WELCOMES are kept (the oldest go).
WELCOME_REPEAT_S = 5.0
MAX_WELCOMES = 8192

# Final: the compiled build reads these as C constants, not from the module's dict at each use.
_SEALED_UNPACK: Final = p.SEALED_HDR.unpack_from
_VERSION: Final = p.VERSION
_DATA: Final = p.DATA



class Initiation:
    """A handshake this node started (the only handshake state anyone keeps)."""

    __slots__ = ("peer", "index", "e", "sym", "msg1", "token", "addr", "tries", "timer_at",
                 "alive", "queue", "queued_bytes", "last_used", "started", "paced_at",
                 "sent_at")

    def __init__(self, peer: str, index: int, e: NodeKey, sym: SymmetricState, msg1: bytes,
                 addr: Address, now: float) -> None:
        self.peer = peer
        self.index = index
        self.e = e
        self.sym = sym
        self.msg1 = msg1
        self.token = b""
        self.addr = addr
        self.tries = 1
        self.timer_at = INF
        self.alive = True
        self.queue: deque[bytes] = deque()
        self.queued_bytes = 0
        self.last_used = now
        self.started = now
        self.paced_at = 0.0  # the slot of the node's first-probe pace a resend waits for
        #: When the newest copy of the HELLO now awaited left: its answer came at least
        #: that long after it, whichever copy it answers (a lower bound of the round trip).
        self.sent_at = now

    def hello(self) -> bytes:
        head = p.HELLO_HDR.pack(p.VERSION, p.HELLO, len(self.token)) + self.token + self.msg1
        return head + bytes(p.HELLO_SIZE - len(head))



class SecureState:
    """Sessions with peers and the handshakes that make them: the fields and shared steps.

    ``stats`` is the node's counter object (``ExonStats``): the parts add to its fields.
    ``on_path(peer, addr)`` is told where a peer is once that address is proven.
    """

    def __init__(self, node_id: str, key: NodeKey, trust: TrustStore,
                 entropy: Callable[[int], bytes], stats: Any, events: deque[Event],
                 on_path: Callable[[str, Address], None], handshake_rate: float = 1000.0,
                 rekey_after_s: float = 120.0, idle_s: float = 120.0,
                 backoff_cap_s: float = 2.0, timeout_s: float = HANDSHAKE_TIMEOUT_S,
                 retry_rate: float = 2000.0,
                 on_session: Callable[[str, float, bool], None] | None = None,
                 pacer: FirstProbePacer | None = None,
                 rtt_of: Callable[[str], float] | None = None) -> None:
        self.id = node_id
        self.key = key
        self.trust = trust
        self._entropy = entropy
        self.stats = stats
        self._events = events
        self._on_path = on_path
        #: ``on_session(peer, now, held)``: a session with ``peer`` was installed and what waited
        #: for it leaves now (Exon restarts its probe timeouts: nothing had left before).
        self._on_session = on_session
        self.incarnation = int.from_bytes(entropy(8), "big")
        #: The node-wide pace of first exchanges' probes (shared with Exon's probe timeouts):
        #: HELLO and INITIATE resends take their slots from it.
        self._pacer = pacer or FirstProbePacer()
        #: ``rtt_of(peer)``: the transport's probe timeout toward the peer, from the round
        #: trips it measured (0: none): the silence rule waits four of them before it
        #: suspects a restart.
        self._rtt_of = rtt_of
        #: The budgets of handshake datagrams from unproven addresses (``meter.py``): native
        #: where ``a3m.NATIVE``, where the native loop sheds a flood's HELLOs from it.
        self._meter: Any = new_meter(handshake_rate, retry_rate)
        # Key exchanges for HELLOs whose RETRY token proved their address: no per-source
        # budget, only this one (PROVEN_RATE); such an address's INITIATE skips its source's
        # budget too (``_proven``: address -> until).
        self._proven_bucket = PROVEN_RATE * HANDSHAKE_BURST_S
        self._proven_at = -INF
        self._proven: dict[Address, float] = {}
        self._rekey_after = rekey_after_s
        self._idle = idle_s
        self._backoff_cap = backoff_cap_s
        self._timeout = timeout_s
        self._by_index: dict[int, Session] = {}
        self._current: dict[str, Session] = {}
        #: The live sessions' per-datagram state, by index and by peer (as the two dicts
        #: above): native where a3m.NATIVE, where the engine opens and seals from it.
        self._table: Any = new_session_table()
        self._previous: dict[str, Session] = {}
        self._pending: dict[str, Initiation] = {}
        self._pending_by_index: dict[int, Initiation] = {}
        self._completed: dict[bytes, tuple[float, Session]] = {}
        self._completed_order: deque[tuple[float, bytes]] = deque()
        #: WELCOMEs made lately, by what their HELLO bound (address, e, index): a repeat of
        #: that HELLO is answered with the same bytes (WELCOME_REPEAT_S), in a FIFO of expiry.
        self._welcomes: dict[bytes, tuple[float, bytes]] = {}
        self._welcomes_order: deque[tuple[float, bytes]] = deque()
        # These three keep their identity for the layer's life: the native engine reads them
        # as they are (whether there is output; the earliest timer, a bound) instead of
        # calling has_output, next_timer and handle_timer at every turn (python_engine.rs).
        self._control: list[tuple[bytes, Address]] = []
        self._timers: list[tuple[float, int, Session | Initiation]] = []
        self._seq = 0
        self._jar = CookieJar(entropy, new_cookie_keys())

    # ------------------------------------------------------------------ queries

    def session_count(self) -> int:
        return len(self._by_index)

    def session_table(self) -> Any:
        """The live sessions' per-datagram state by index and by peer
        (``a3m.exon.secure.session.SessionTable`` or its native twin, which the native
        engine reads)."""
        return self._table

    def sessions_by_index(self) -> dict[int, Session]:
        """The live sessions by the index datagrams under them carry (read it, never change
        it): what ``ExonProtocol.receive_datagrams`` looks up to take them first."""
        return self._by_index

    def source_count(self) -> int:
        """Sources whose handshake budget is being tracked (bounded by ``MAX_SOURCES``)."""
        return int(self._meter.source_count())

    def cookie_keys(self) -> Any:
        """The native twin of the cookie jar's secrets (``a3m._native.CookieKeys``; None
        without ``a3m.NATIVE``): the native reads refuse forged INITIATEs from it."""
        return self._jar.twin

    def meter(self) -> Any:
        """The budgets of handshake datagrams (``meter.HandshakeMeter`` or its native twin,
        which the native loop sheds from)."""
        return self._meter

    def pending_count(self) -> int:
        return len(self._pending)

    def holding(self, peer: str) -> bool:
        """Whether what is sent to ``peer`` now waits in a handshake's queue (a handshake runs
        and no session seals for it): a probe then would only add a copy to that queue."""
        return peer in self._pending and peer not in self._current

    def handshake_rtt(self, peer: str) -> float:
        """A lower bound of the round trip of our handshake with ``peer``: from the newest
        copy of our HELLO to the WELCOME (0: we did not initiate). A first exchange's probes
        wait at least about that long (a loaded responder's queue is in it)."""
        s = self._current.get(peer)
        return s.rtt_sample if s is not None else 0.0

    def loaded(self, peer: str) -> bool:
        """Whether ``peer`` answered our handshake's HELLO with a RETRY (it was past its
        handshake rate): a first exchange with it backs off from its first probe."""
        s = self._current.get(peer)
        return s is not None and s.busy

    def has_output(self) -> bool:
        return bool(self._control)

    def take_control(self) -> list[tuple[bytes, Address]]:
        """Handshake and path packets (and datagrams a completed handshake released)."""
        out = self._control.copy()  # (the list itself stays: see __init__)
        self._control.clear()
        return out

    def peer_key(self, peer: str) -> bytes | None:
        """The long-term key ``peer`` speaks with (pinned or learnt), if any yet."""
        return self.trust.key_of(peer)

    def next_timer(self) -> float | None:
        timers = self._timers
        welcomes = self._welcomes_order
        kept = welcomes[0][0] if welcomes else None  # the oldest WELCOME kept for repeats
        while timers:
            t, _, obj = timers[0]
            if obj.alive and obj.timer_at == t:
                return t if kept is None or t < kept else kept
            heapq.heappop(timers)
        return kept

    def kept_welcomes(self) -> int:
        """WELCOMEs kept to answer a repeated HELLO without a key exchange (expire after
        WELCOME_REPEAT_S)."""
        return len(self._welcomes)

    # ------------------------------------------------------------------ shared steps

    def _seal(self, s: Session, kind: int, pt: bytes, now: float) -> bytes:
        counter = s.counter
        s.counter = counter + 1
        s.last_sent = now
        return s.seal.seal(kind, s.remote_index, counter, pt)

    def _fresh_index(self) -> int:
        while True:
            i = int.from_bytes(self._entropy(4), "big")
            if i not in self._by_index and i not in self._pending_by_index:
                return i


    def _install(self, s: Session, now: float) -> None:
        peer = s.peer
        old = self._current.get(peer)
        if old is not None:
            prev = self._previous.pop(peer, None)
            if prev is not None:
                self._drop(prev)
            if old.incarnation != s.incarnation:
                self._drop(old)  # the peer restarted: nothing of its past opens any more
                self.stats.peer_restarts += 1
                self._events.append(PeerRestarted(peer))
            else:
                self._previous[peer] = old
                # The same incarnation: a silence that made this handshake was the peer
                # being slow (a loaded node), not a restart: wait twice as long next time.
                if old.silenced:
                    s.silence_s = min(2 * old.silence_s, MAX_SILENCE_S)
                else:
                    s.silence_s = old.silence_s
        self._current[peer] = s
        self._by_index[s.local_index] = s
        self._table.install(s.local_index, s.path)
        # Lifetimes stretch with the handshake's round trip, so that a new handshake always
        # completes before the old session is refused, even on a very long path.
        s.rekey_at = s.created + max(self._rekey_after, 8 * s.rtt)
        s.reject_at = s.rekey_at + max(self._rekey_after / 2, 8 * s.rtt)
        self._arm(s, min(s.reject_at, now + self._idle))
        self._on_path(peer, s.addr)

    def _drop(self, s: Session) -> None:
        s.alive = False
        if s.handshake_key:
            self._completed.pop(s.handshake_key, None)
        if self._by_index.pop(s.local_index, None) is s:
            self._table.drop(s.local_index, s.path)
        if self._current.get(s.peer) is s:
            del self._current[s.peer]
        if self._previous.get(s.peer) is s:
            del self._previous[s.peer]

    # ------------------------------------------------------------------ timers

    def _paced(self, obj: Session | Initiation, now: float) -> bool:
        """Whether a resend of ``obj``'s HELLO or INITIATE may go now: its reserved slot of
        the node's first-probe pace came, or the pace has room; else a slot is reserved and
        ``obj``'s timer armed there (``a3m.exon.pacer``)."""
        held = obj.paced_at
        t = obj.paced_at = self._pacer.admit(held, now, self._timeout)
        if not t:
            return True
        if t != held:
            self.stats.probes_deferred += 1
        self._arm(obj, t)
        return False

    def _arm(self, obj: Session | Initiation, t: float) -> None:
        if t < obj.timer_at:
            obj.timer_at = t
            self._seq += 1
            timers = self._timers
            heapq.heappush(timers, (t, self._seq, obj))
            live = len(self._by_index) + len(self._pending)
            if len(timers) > 64 and len(timers) > 4 * live:  # drop the stale entries
                timers[:] = [e for e in timers if e[2].alive and e[2].timer_at == e[0]]
                heapq.heapify(timers)  # (in place: see __init__)

