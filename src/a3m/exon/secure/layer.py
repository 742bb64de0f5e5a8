"""The secure layer between the UDP socket and Exon's frames (:class:`SecureLayer`).

Sans-I/O: :meth:`SecureLayer.open` takes a datagram, its source address and the time, and
returns the Exon datagram it carried and the authenticated peer (or None: a handshake packet,
or something dropped and counted); :meth:`SecureLayer.seal` turns an Exon datagram for a peer
into what to send, starting a handshake when there is no session yet. Rules and byte layout:
``docs/exon-wire.md``, "Secure associations".
"""

from __future__ import annotations

import heapq
import ipaddress
import struct
from collections import deque
from collections.abc import Callable, Hashable
from typing import Any

from cryptography.exceptions import InvalidTag

from a3m.exon.events import Event, KeyRefused, PeerRestarted
from a3m.exon.recovery import UNSAMPLED_STEADY_PTOS
from a3m.exon.secure import handshake as hs
from a3m.exon.secure import packets as p
from a3m.exon.secure.cookies import COOKIE_LIFETIME_S, CookieJar
from a3m.exon.secure.keys import KEY_BYTES, NodeKey
from a3m.exon.secure.noise import HandshakeError, SymmetricState
from a3m.exon.secure.replay import WINDOW as REPLAY_WINDOW
from a3m.exon.secure.session import INF, Session
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
SILENCE_REHANDSHAKE_S = 1.0
UNANSWERED_REHANDSHAKE = 4
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
#: Under load, handshake datagrams (HELLO, INITIATE) a second that one source may make this
#: node work on (a RETRY, a token or cookie checked, a key exchange), and the burst allowed;
#: beyond it they are dropped before any cryptography (``unauth_shed``). A source is an IPv4
#: address or an IPv6 /64, whatever the port (WireGuard's rule): the port costs an attacker
#: nothing.
SOURCE_RATE = 100.0
#: The handshake and RETRY budgets hold this many seconds' worth at most (the burst): a
#: flood's first moments cost a tenth of a second of key exchanges, not a whole second.
HANDSHAKE_BURST_S = 0.1
#: Under load, a HELLO answered with a RETRY takes this much of its source's budget (a key
#: exchange or a cookie checked takes 1): a RETRY costs an HMAC and a datagram smaller than
#: the HELLO, and ``retry_rate`` bounds them all, so a fleet behind one address (a NAT, a
#: Kubernetes node) gets SOURCE_RATE / RETRY_COST RETRYs a second, then proves itself.
RETRY_COST = 0.1
#: Addresses that proved themselves (a HELLO with a valid RETRY token) stay proven this
#: long, and at most this many are remembered (all forgotten beyond).
PROVEN_S = COOKIE_LIFETIME_S
MAX_PROVEN = 65536
#: Key exchanges a second for HELLOs whose RETRY token proved their address, in all (a 0.1 s
#: burst): no per-source budget holds them, only this bound on the CPU they may take (a
#: responder's key exchanges cost ~0.3 ms: about half a core). A token replayed is refused
#: nothing more than this.
PROVEN_RATE = 2000.0
#: Sources whose budget is tracked at once; beyond, those idle for a second (their budget
#: full again) are forgotten, and all of them if that is not enough.
MAX_SOURCES = 4096

_NONCE = struct.Struct(">4xQ").pack
_SEALED_PACK = p.SEALED_HDR.pack
_SEALED_UNPACK = p.SEALED_HDR.unpack_from
_VERSION = p.VERSION
_DATA = p.DATA
_REPLAY_MASK = (1 << REPLAY_WINDOW) - 1


class _Initiation:
    """A handshake this node started (the only handshake state anyone keeps)."""

    __slots__ = ("peer", "index", "e", "sym", "msg1", "token", "addr", "tries", "timer_at",
                 "alive", "queue", "queued_bytes", "last_used", "started")

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

    def hello(self) -> bytes:
        head = p.HELLO_HDR.pack(p.VERSION, p.HELLO, len(self.token)) + self.token + self.msg1
        return head + bytes(p.HELLO_SIZE - len(head))


def _addr_bytes(addr: Address) -> bytes:
    return repr(addr).encode()


def source_of(addr: Address) -> Hashable:
    """The source an address counts as for the per-source budgets: an IPv4 address, an
    IPv6 /64 (a host's usual share), whatever the port; any other address as it is."""
    if isinstance(addr, tuple) and addr and isinstance(addr[0], str):
        host: str = addr[0]
        if ":" not in host:
            return host
        try:
            return ipaddress.IPv6Address(host.split("%", 1)[0]).packed[:8]
        except ValueError:
            return host
    return addr


class SecureLayer:
    """Sessions with peers, the handshakes that make them, and the paths they use.

    ``stats`` is the node's counter object (``ExonStats``): the layer adds to its fields.
    ``on_path(peer, addr)`` is told where a peer is once that address is proven.
    """

    def __init__(self, node_id: str, key: NodeKey, trust: TrustStore,
                 entropy: Callable[[int], bytes], stats: Any, events: deque[Event],
                 on_path: Callable[[str, Address], None], handshake_rate: float = 1000.0,
                 rekey_after_s: float = 120.0, idle_s: float = 120.0,
                 backoff_cap_s: float = 2.0, timeout_s: float = HANDSHAKE_TIMEOUT_S,
                 retry_rate: float = 2000.0,
                 on_session: Callable[[str, float], None] | None = None) -> None:
        self.id = node_id
        self.key = key
        self.trust = trust
        self._entropy = entropy
        self.stats = stats
        self._events = events
        self._on_path = on_path
        #: ``on_session(peer, now)``: a session with ``peer`` was installed and what waited
        #: for it leaves now (Exon restarts its probe timeouts: nothing had left before).
        self._on_session = on_session
        self.incarnation = int.from_bytes(entropy(8), "big")
        self._rate = handshake_rate
        # HELLOs without a token, metered: each takes one (answered or not), down to a debt
        # of a second's worth; a key exchange only while one is left. A flood past the rate
        # keeps it in debt, so a sustained flood gets no key exchange at all.
        self._bucket = handshake_rate * HANDSHAKE_BURST_S
        self._bucket_at = -INF
        self._retry_rate = retry_rate
        self._retries = retry_rate * HANDSHAKE_BURST_S  # RETRYs a second, in all
        self._retries_at = -INF
        self._sources: dict[Hashable, list[float]] = {}  # source -> [budget left, when]
        # Key exchanges for HELLOs whose RETRY token proved their address: no per-source
        # budget, only this one (PROVEN_RATE); such an address's INITIATE skips its source's
        # budget too (``_proven``: address -> until).
        self._proven_bucket = PROVEN_RATE * HANDSHAKE_BURST_S
        self._proven_at = -INF
        self._proven: dict[Address, float] = {}
        # HELLOs and INITIATEs, metered as the bucket above but over a second's burst: in
        # debt, the node is under load and the per-source budgets apply.
        self._load = handshake_rate
        self._load_at = -INF
        self._rekey_after = rekey_after_s
        self._idle = idle_s
        self._backoff_cap = backoff_cap_s
        self._timeout = timeout_s
        self._by_index: dict[int, Session] = {}
        self._current: dict[str, Session] = {}
        self._previous: dict[str, Session] = {}
        self._pending: dict[str, _Initiation] = {}
        self._pending_by_index: dict[int, _Initiation] = {}
        self._completed: dict[bytes, tuple[float, Session]] = {}
        self._completed_order: deque[tuple[float, bytes]] = deque()
        self._control: list[tuple[bytes, Address]] = []
        self._timers: list[tuple[float, int, Session | _Initiation]] = []
        self._seq = 0
        self._jar = CookieJar(entropy)

    # ------------------------------------------------------------------ queries

    def session_count(self) -> int:
        return len(self._by_index)

    def sessions_by_index(self) -> dict[int, Session]:
        """The live sessions by the index datagrams under them carry (read it, never change
        it): what ``ExonProtocol.receive_datagrams`` looks up to take them first."""
        return self._by_index

    def source_count(self) -> int:
        """Sources whose handshake budget is being tracked (bounded by MAX_SOURCES)."""
        return len(self._sources)

    def pending_count(self) -> int:
        return len(self._pending)

    def has_output(self) -> bool:
        return bool(self._control)

    def take_control(self) -> list[tuple[bytes, Address]]:
        """Handshake and path packets (and datagrams a completed handshake released)."""
        out, self._control = self._control, []
        return out

    def peer_key(self, peer: str) -> bytes | None:
        """The long-term key ``peer`` speaks with (pinned or learnt), if any yet."""
        return self.trust.key_of(peer)

    def next_timer(self) -> float | None:
        timers = self._timers
        while timers:
            t, _, obj = timers[0]
            if obj.alive and obj.timer_at == t:
                return t
            heapq.heappop(timers)
        return None

    # ------------------------------------------------------------------ receiving

    def open(self, data: bytes | memoryview, addr: Address, now: float
             ) -> tuple[bytes, str] | None:
        """The Exon datagram ``data`` carried and its authenticated sender, or None."""
        st = self.stats
        n = len(data)
        if n < 2 or data[0] != p.VERSION:
            st.malformed += 1
            return None
        kind = data[1]
        if kind == p.DATA or kind == p.CHALLENGE or kind == p.RESPONSE:
            if n < p.SEALED_OVERHEAD:
                st.truncated += 1
                return None
            _, _, index, counter = _SEALED_UNPACK(data)
            s = self._by_index.get(index)
            if s is None:
                st.unknown_session += 1
                return None
            # The replay window (replay.py), inlined: checked before the tag, marked after.
            replay = s.replay
            top = replay.top
            newest = counter > top
            if not newest:
                off = top - counter
                if off >= REPLAY_WINDOW or (replay.bits >> off) & 1:
                    st.replayed += 1
                    return None
            try:
                pt = s.open.decrypt(_NONCE(counter), data[14:], data[:14])
            except InvalidTag:
                st.forged += 1
                return None
            if newest:
                replay.bits = ((replay.bits << (counter - top)) | 1) & _REPLAY_MASK
                replay.top = counter
            else:
                replay.bits |= 1 << off
            s.last_recv = now
            s.unanswered = 0
            if not s.confirmed:
                s.confirmed = True
                s.initiate = b""
            if addr != s.addr:
                self._moved(s, addr, newest, n, now)
            elif s.candidate is not None and newest:
                s.candidate = None  # the peer is back where it was proven to be
            if kind == p.DATA:
                if not pt:
                    return None  # a keepalive
                return pt, s.peer
            if kind == p.CHALLENGE:
                if len(pt) == p.CHALLENGE_BYTES:
                    self._control.append((self._seal(s, p.RESPONSE, pt, now), addr))
            elif s.candidate is not None and pt == s.challenge and addr == s.candidate:
                self._validated(s, now)
            return None
        if kind == p.HELLO:
            self._on_hello(data, addr, now)
        elif kind == p.WELCOME:
            self._on_welcome(data, addr, now)
        elif kind == p.INITIATE:
            self._on_initiate(data, addr, now)
        elif kind == p.RETRY:
            self._on_retry(data, now)
        elif kind == p.PLAIN:
            st.plain_refused += 1
        else:
            st.malformed += 1
        return None

    def _moved(self, s: Session, addr: Address, newest: bool, n: int, now: float) -> None:
        """An authenticated datagram from an address other than the proven one."""
        if not newest:
            self.stats.old_path_datagrams += 1  # reordered: it moves nothing
            return
        if addr == s.candidate:
            s.budget += 3 * n
            return
        s.candidate = addr
        s.budget = 3 * n
        s.challenge = self._entropy(p.CHALLENGE_BYTES)
        s.challenge_tries = 0
        self._challenge(s, now)

    def _challenge(self, s: Session, now: float) -> None:
        assert s.candidate is not None
        pkt = self._seal(s, p.CHALLENGE, s.challenge, now)
        s.budget -= len(pkt)
        s.challenge_tries += 1
        self.stats.path_challenges += 1
        self._control.append((pkt, s.candidate))
        self._arm(s, now + min(self._timeout * 2 ** (s.challenge_tries - 1),
                               self._backoff_cap))

    def _validated(self, s: Session, now: float) -> None:
        addr = s.candidate
        s.addr = addr
        s.candidate = None
        s.budget = 0
        self.stats.paths_validated += 1
        if self._current.get(s.peer) is s:
            self._on_path(s.peer, addr)

    # ------------------------------------------------------------------ sending

    def seal(self, peer: str, plain: bytes, addr: Address, now: float,
             out: list[tuple[bytes, Address]]) -> None:
        """Seal the Exon datagram ``plain`` for ``peer`` into ``out``, or hold it while a
        handshake (started here if needed, toward ``addr``) completes."""
        s = self._current.get(peer)
        if s is not None and now >= s.reject_at:
            self._drop(s)
            s = None
        if s is not None:
            s.unanswered += 1
            if ((s.initiator and now >= s.rekey_at)
                    or (s.unanswered > UNANSWERED_REHANDSHAKE
                        and now - s.last_recv > max(SILENCE_REHANDSHAKE_S, 4 * s.rtt))
                    ) and peer not in self._pending:
                self._initiate(peer, addr, now)
            counter = s.counter  # _seal, inlined (the hot path)
            s.counter = counter + 1
            s.last_sent = now
            hdr = _SEALED_PACK(_VERSION, _DATA, s.remote_index, counter)
            pkt = hdr + s.seal.encrypt(_NONCE(counter), plain, hdr)
            dest = s.addr
            if s.candidate is not None:
                if s.budget >= len(pkt):
                    s.budget -= len(pkt)
                    dest = s.candidate
                else:
                    self.stats.amplification_limited += 1
            out.append((pkt, dest))
            return
        init = self._pending.get(peer) or self._initiate(peer, addr, now)
        if init is None:
            self.stats.sealed_dropped += 1
            return
        init.last_used = now
        q = init.queue
        q.append(plain)
        init.queued_bytes += len(plain)
        while len(q) > MAX_QUEUED or (init.queued_bytes > MAX_QUEUED_BYTES and len(q) > 1):
            init.queued_bytes -= len(q.popleft())
            self.stats.sealed_dropped += 1

    def _seal(self, s: Session, kind: int, pt: bytes, now: float) -> bytes:
        counter = s.counter
        s.counter = counter + 1
        s.last_sent = now
        hdr = _SEALED_PACK(p.VERSION, kind, s.remote_index, counter)
        return hdr + s.seal.encrypt(_NONCE(counter), pt, hdr)

    # ------------------------------------------------------------------ handshakes

    def _fresh_index(self) -> int:
        while True:
            i = int.from_bytes(self._entropy(4), "big")
            if i not in self._by_index and i not in self._pending_by_index:
                return i

    def _initiate(self, peer: str, addr: Address, now: float) -> _Initiation | None:
        if len(self._pending) >= MAX_PENDING:
            return None
        old = self._pending.pop(peer, None)
        if old is not None:
            old.alive = False
            self._pending_by_index.pop(old.index, None)
        index = self._fresh_index()
        e = NodeKey.generate(self._entropy)
        sym, msg1 = hs.hello(e, peer, index)
        init = _Initiation(peer, index, e, sym, msg1, addr, now)
        self._pending[peer] = init
        self._pending_by_index[index] = init
        self.stats.handshakes_started += 1
        self._control.append((init.hello(), addr))
        self._arm(init, now + self._timeout)
        return init

    def _source_ok(self, addr: Address, now: float, cost: float = 1.0) -> bool:
        """Under load, take one from the budget of the source ``addr`` counts as (False: it
        is spent; counted ``unauth_shed``). Under load: more HELLOs and INITIATEs than
        ``handshake_rate`` a second, over about a second (WireGuard limits per source only
        under load too: a hundred nodes behind one address starting at once are not load)."""
        rate = self._rate
        load = min(rate, self._load + (now - self._load_at) * rate)
        self._load_at = now
        self._load = max(-rate, load - 1.0)
        if load >= 1.0:
            return True
        key = source_of(addr)
        sources = self._sources
        b = sources.get(key)
        if b is None:
            if len(sources) >= MAX_SOURCES:
                for k in [k for k, v in sources.items() if now - v[1] >= 1.0]:
                    del sources[k]
                if len(sources) >= MAX_SOURCES:
                    sources.clear()
            sources[key] = [SOURCE_RATE - cost, now]
            return True
        left = min(SOURCE_RATE, b[0] + (now - b[1]) * SOURCE_RATE)
        b[1] = now
        if left < cost:
            b[0] = left
            self.stats.unauth_shed += 1
            return False
        b[0] = left - cost
        return True

    def _proven_ok(self, addr: Address, now: float) -> bool:
        """A HELLO's RETRY token checked out: ``addr`` is proven. Take a key exchange from
        the proven peers' budget (False: spent, ``unauth_shed``), not from its source's:
        thousands of honest peers behind one address are held by CPU only."""
        left = min(PROVEN_RATE * HANDSHAKE_BURST_S,
                   self._proven_bucket + (now - self._proven_at) * PROVEN_RATE)
        self._proven_at = now
        if left < 1.0:
            self._proven_bucket = left
            self.stats.unauth_shed += 1
            return False
        self._proven_bucket = left - 1.0
        proven = self._proven
        if len(proven) >= MAX_PROVEN and addr not in proven:
            proven.clear()
        proven[addr] = now + PROVEN_S
        return True

    def _on_hello(self, data: bytes | memoryview, addr: Address, now: float) -> None:
        st = self.stats
        if len(data) < p.HELLO_SIZE:
            st.truncated += 1
            return
        tlen = data[2]
        if tlen not in (0, p.TOKEN_BYTES):
            st.malformed += 1
            return
        busy = False
        if not tlen:  # (a token is checked below: a valid one skips the source's budget)
            rate = self._rate
            left = min(rate * HANDSHAKE_BURST_S, self._bucket + (now - self._bucket_at) * rate)
            if not self._source_ok(addr, now, RETRY_COST if left < 1.0 else 1.0):
                return
            self._bucket_at = now
            self._bucket = max(-rate, left - 1.0)
            if left < 1.0:
                # Busy: prove your address first (a RETRY is smaller than the HELLO), as
                # many as the RETRY budget allows; beyond it, nothing at all.
                r = self._retry_rate
                retries = min(r * HANDSHAKE_BURST_S,
                              self._retries + (now - self._retries_at) * r)
                self._retries_at = now
                if retries < 1.0:
                    self._retries = retries
                    st.unauth_shed += 1
                    return
                self._retries = retries - 1.0
                busy = True
        at = 3 + tlen
        e_i = bytes(data[at:at + KEY_BYTES])
        index_b = bytes(data[at + KEY_BYTES:at + KEY_BYTES + 4])
        bound = _addr_bytes(addr) + e_i + index_b
        if tlen:
            # The address is proven (or the token forged): an HMAC tells, then only the
            # proven peers' budget applies (docs/exon-wire.md, "Under load").
            if not self._jar.token_ok(bytes(data[3:at]), bound, now):
                st.token_invalid += 1
                return
            if not self._proven_ok(addr, now):
                return
        elif busy:
            st.retries_sent += 1
            token = self._jar.token(bound, now)
            self._control.append((p.RETRY_HDR.pack(p.VERSION, p.RETRY,
                                                   *hs.INDEX.unpack(index_b)) + token, addr))
            return
        if len(self._by_index) >= MAX_SESSIONS:
            st.sessions_full += 1
            return
        (index_i,) = hs.INDEX.unpack(index_b)
        e = NodeKey.generate(self._entropy)
        r_index = int.from_bytes(self._entropy(4), "big")
        cookie = self._jar.seal(e.private, r_index, bound, now)
        try:
            _, msg2 = hs.respond(self.key, self.id, e, e_i, index_i, r_index, self.incarnation,
                                 cookie)
        except HandshakeError:
            st.handshake_failed += 1
            return
        st.hellos_answered += 1
        self._control.append((p.WELCOME_HDR.pack(p.VERSION, p.WELCOME, index_i) + msg2, addr))

    def _on_retry(self, data: bytes | memoryview, now: float) -> None:
        if len(data) != p.RETRY_HDR.size + p.TOKEN_BYTES:
            self.stats.malformed += 1
            return
        _, _, index = p.RETRY_HDR.unpack_from(data)
        init = self._pending_by_index.get(index)
        if init is None:
            self.stats.unexpected_handshakes += 1
            return
        self.stats.retries_received += 1
        init.token = bytes(data[p.RETRY_HDR.size:])
        self._control.append((init.hello(), init.addr))

    def _on_welcome(self, data: bytes | memoryview, addr: Address, now: float) -> None:
        st = self.stats
        if len(data) < p.WELCOME_HDR.size:
            st.truncated += 1
            return
        _, _, index = p.WELCOME_HDR.unpack_from(data)
        init = self._pending_by_index.get(index)
        if init is None:
            st.unexpected_handshakes += 1  # late (already complete), or forged
            return
        sym = init.sym.copy()  # a forged WELCOME must leave the handshake as it was
        try:
            w, re = hs.read_welcome(sym, init.e, bytes(data[p.WELCOME_HDR.size:]))
        except (HandshakeError, struct.error):
            st.handshake_failed += 1
            return
        if w.responder_id != init.peer:
            st.handshake_failed += 1
            return
        if not self.trust.admits(init.peer, w.responder_key):
            st.key_refused += 1
            self._events.append(KeyRefused(init.peer, w.responder_key))
            return
        msg3, keys = hs.initiate(sym, self.key, re, self.id, self.incarnation)
        self._end_pending(init)
        s = Session(init.peer, init.index, w.responder_index, keys, True, w.incarnation,
                    init.addr, now)
        s.initiate = (p.INITIATE_HDR.pack(p.VERSION, p.INITIATE, init.index) + init.e.public
                      + w.cookie + msg3)
        s.rtt = now - init.started
        st.handshakes_completed += 1
        self._install(s, now)
        self._control.append((s.initiate, s.addr))
        self._arm(s, now + self._timeout)
        for plain in init.queue:
            self._control.append((self._seal(s, p.DATA, plain, now), s.addr))
        if self._on_session is not None:
            self._on_session(s.peer, now)
        if addr != s.addr:
            self._moved(s, addr, True, len(data), now)

    def _on_initiate(self, data: bytes | memoryview, addr: Address, now: float) -> None:
        st = self.stats
        head = p.INITIATE_HDR.size
        if len(data) < head + KEY_BYTES + hs.COOKIE_BYTES:
            st.truncated += 1
            return
        until = self._proven.get(addr)
        if (until is None or now >= until) and not self._source_ok(addr, now):
            return
        _, _, index_i = p.INITIATE_HDR.unpack_from(data)
        e_i = bytes(data[head:head + KEY_BYTES])
        cookie = bytes(data[head + KEY_BYTES:head + KEY_BYTES + hs.COOKIE_BYTES])
        opened = self._jar.open(cookie, _addr_bytes(addr) + e_i + hs.INDEX.pack(index_i), now)
        if opened is None:
            st.cookie_invalid += 1  # forged, from another address, or too old
            return
        e_priv, r_index, made = opened
        done = self._completed.get(e_i)
        if done is not None:
            # A repeat: our first answer under the session was lost. Answer under it again.
            st.handshake_repeats += 1
            s0 = done[1]
            if s0.alive:
                self._control.append((self._seal(s0, p.DATA, b"", now), s0.addr))
            return
        if r_index in self._by_index or len(self._by_index) >= MAX_SESSIONS:
            st.sessions_full += 1
            return
        e = NodeKey(e_priv)
        try:
            sym, _ = hs.respond(self.key, self.id, e, e_i, index_i, r_index, self.incarnation,
                                cookie)
            got = hs.read_initiate(sym, e, bytes(data[head + KEY_BYTES + hs.COOKIE_BYTES:]))
        except (HandshakeError, struct.error):
            st.handshake_failed += 1
            return
        peer = got.initiator_id
        if peer == self.id:
            st.from_self += 1
            return
        if not self.trust.admits(peer, got.initiator_key):
            st.key_refused += 1
            self._events.append(KeyRefused(peer, got.initiator_key))
            return
        s = Session(peer, r_index, index_i, got.keys, False, got.incarnation, addr, now)
        s.handshake_key = e_i
        s.rtt = now - made  # from our WELCOME to this INITIATE
        self._remember(e_i, s, now)
        st.handshakes_accepted += 1
        self._install(s, now)
        # Confirm at once: the initiator resends INITIATE until something opens under it.
        self._control.append((self._seal(s, p.DATA, b"", now), addr))
        if self._on_session is not None:
            self._on_session(peer, now)

    def _remember(self, e_i: bytes, s: Session, now: float) -> None:
        """Keep the handshake made from ``e_i`` for twice a cookie's life (a repeated
        INITIATE is answered under its session). Every entry lives as long, so they expire in
        the order they came: the expired ones leave from the front of ``_completed_order``
        (a handshake costs O(1), not a look at every handshake of the last four minutes)."""
        done = self._completed
        order = self._completed_order
        while order and order[0][0] < now:
            t, k = order.popleft()
            got = done.get(k)
            if got is not None and got[0] == t:
                del done[k]
        t = now + 2 * COOKIE_LIFETIME_S
        done[e_i] = (t, s)
        order.append((t, e_i))

    def _end_pending(self, init: _Initiation) -> None:
        init.alive = False
        if self._pending.get(init.peer) is init:
            del self._pending[init.peer]
        self._pending_by_index.pop(init.index, None)

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
        self._current[peer] = s
        self._by_index[s.local_index] = s
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
        self._by_index.pop(s.local_index, None)
        if self._current.get(s.peer) is s:
            del self._current[s.peer]
        if self._previous.get(s.peer) is s:
            del self._previous[s.peer]

    def _resend_after(self, tries: int) -> float:
        """The wait before resend number ``tries`` (1 = the first resend) of HELLO or
        INITIATE: ``timeout_s`` for FAST_TRIES resends, then doubling up to the cap."""
        if tries <= FAST_TRIES:
            return self._timeout
        wait: float = self._timeout * (1 << min(tries - FAST_TRIES, 16))
        return min(wait, self._backoff_cap)

    # ------------------------------------------------------------------ timers

    def _arm(self, obj: Session | _Initiation, t: float) -> None:
        if t < obj.timer_at:
            obj.timer_at = t
            self._seq += 1
            heapq.heappush(self._timers, (t, self._seq, obj))

    def handle_timer(self, now: float) -> None:
        timers = self._timers
        while timers and timers[0][0] <= now:
            t, _, obj = heapq.heappop(timers)
            if not obj.alive or obj.timer_at != t:
                continue
            obj.timer_at = INF
            if isinstance(obj, _Initiation):
                self._initiation_timer(obj, now)
            else:
                self._session_timer(obj, now)
        live = len(self._by_index) + len(self._pending)
        if len(timers) > 64 and len(timers) > 4 * live:  # drop the stale entries
            self._timers = [e for e in timers if e[2].alive and e[2].timer_at == e[0]]
            heapq.heapify(self._timers)

    def _initiation_timer(self, init: _Initiation, now: float) -> None:
        if now - init.last_used >= HANDSHAKE_GIVE_UP_S:
            self._end_pending(init)
            self.stats.handshakes_abandoned += 1
            return
        self.stats.hello_resends += 1
        self._control.append((init.hello(), init.addr))
        self._arm(init, now + self._resend_after(init.tries))
        init.tries += 1

    def _session_timer(self, s: Session, now: float) -> None:
        expiry = min(s.reject_at,
                     max(s.last_recv, s.last_sent) + max(self._idle, 4 * s.rtt))
        if now >= expiry:
            self._drop(s)  # too old, or idle: the next datagram makes a new one
            self.stats.sessions_expired += 1
            return
        nxt = expiry
        if not s.confirmed and s.initiate:
            if now - s.created > COOKIE_LIFETIME_S:
                self._drop(s)  # the responder can no longer accept it: start again
                self.stats.handshakes_abandoned += 1
                return
            s.initiate_tries += 1
            self.stats.initiate_resends += 1
            self._control.append((s.initiate, s.addr))
            nxt = min(nxt, now + self._resend_after(s.initiate_tries + 1))
        elif s.candidate is not None:
            if s.challenge_tries >= CHALLENGE_TRIES:
                s.candidate = None
                self.stats.paths_abandoned += 1
            else:
                self._challenge(s, now)
                return
        self._arm(s, nxt)
