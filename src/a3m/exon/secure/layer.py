"""The secure layer between the UDP socket and Exon's frames (:class:`SecureLayer`).

Sans-I/O: :meth:`SecureLayer.open` takes a datagram, its source address and the time, and
returns the Exon datagram it carried and the authenticated peer (or None: a handshake packet,
or something dropped and counted); :meth:`SecureLayer.seal` turns an Exon datagram for a peer
into what to send, starting a handshake when there is no session yet. Rules and byte layout:
``docs/exon-wire.md``, "Secure associations".

This module is the dispatcher and the hot path (open and seal a session's datagrams, the
timers); the rest is in parts (``state.py`` says how they stack): ``paths.py`` (mobility),
``initiator.py`` and ``responder.py`` (the two sides of the handshake and the budgets).
"""

from __future__ import annotations

import heapq

from a3m.exon.secure import packets as p
from a3m.exon.secure.cookies import COOKIE_LIFETIME_S
from a3m.exon.secure.responder import ResponderPart
from a3m.exon.secure.session import INF, Session
from a3m.exon.secure.state import (
    _DATA,
    _SEALED_UNPACK,
    _VERSION,
    CHALLENGE_TRIES,
    FAST_TRIES,
    MAX_QUEUED,
    MAX_QUEUED_BYTES,
    UNANSWERED_REHANDSHAKE,
    Address,
    Initiation,
)


class SecureLayer(ResponderPart):
    """Sessions with peers, the handshakes that make them, and the paths they use.

    ``stats`` is the node's counter object (``ExonStats``): the layer adds to its fields.
    ``on_path(peer, addr)`` is told where a peer is once that address is proven.
    """

    # ------------------------------------------------------------------ receiving

    def open(self, data: bytes | memoryview, addr: Address, now: float
             ) -> tuple[bytes, str] | None:
        """The Exon datagram ``data`` carried and its authenticated sender, or None."""
        st = self.stats
        # Bytes, and typed fields: the compiled build then indexes and slices natively.
        buf = data if isinstance(data, bytes) else bytes(data)
        n = len(buf)
        if n < 2 or buf[0] != _VERSION:
            st.malformed += 1
            return None
        kind = buf[1]
        if kind == _DATA or kind == p.CHALLENGE or kind == p.RESPONSE:
            if n < p.SEALED_OVERHEAD:
                st.truncated += 1
                return None
            index: int
            counter: int
            _, _, index, counter = _SEALED_UNPACK(buf)
            s = self._by_index.get(index)
            if s is None:
                st.unknown_session += 1
                return None
            # The replay window (replay.py): checked before the tag, marked after.
            replay = s.replay
            newest = counter > replay.top
            if not newest and not replay.fresh(counter):
                st.replayed += 1
                return None
            opened = s.open.open(buf)
            if opened is None:
                st.forged += 1
                return None
            pt: bytes = opened
            replay.accept(counter)
            s.last_recv = now
            s.unanswered = 0
            if not s.confirmed:
                s.confirmed = True
                s.initiate = b""
            if addr != s.addr:
                self._moved(s, addr, newest, n, now)
            elif s.candidate is not None and newest:
                s.candidate = None  # the peer is back where it was proven to be
            if kind == _DATA:
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

    def open_hello(self, data: bytes, addr: Address, now: float, verdict: int) -> None:
        """A token-less HELLO the native loop read and metered already (``verdict``:
        ``meter.RETRY`` or ``meter.EXCHANGE``; it shed the others itself): :meth:`open`'s
        answer to it, without metering it twice."""
        self._on_hello(data, addr, now, verdict)

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
            if peer not in self._pending and self._renew_due(s, now):
                self._initiate(peer, addr, now)
            counter = s.counter  # _seal, inlined (the hot path)
            s.counter = counter + 1
            s.last_sent = now
            pkt = s.seal.seal(_DATA, s.remote_index, counter, plain)
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

    def _silence(self, s: Session, now: float) -> bool:
        """Whether the peer's silence under ``s`` is long enough to suspect a restart: also
        four of the transport's probe timeouts toward it (from the round trips it measured:
        a loaded peer's queue is in them, so a fleet's collector answering late is not taken
        for a restart). Noted when so (a new handshake that finds the same incarnation then
        doubles the next silence)."""
        if self._rtt_of is not None and now - s.last_recv <= 4 * self._rtt_of(s.peer):
            return False
        s.silenced = True
        return True

    def _renew_due(self, s: Session, now: float) -> bool:
        """A new handshake is due under ``s``: the initiator's rekey time came, or the peer
        went silent while datagrams went unanswered. (An unconfirmed session's INITIATE is
        being resent: its fast tries come first, as a new handshake would only add a key
        exchange behind them.)"""
        return ((s.initiator and now >= s.rekey_at)
                or (s.unanswered > UNANSWERED_REHANDSHAKE
                    and now - s.last_recv > max(s.silence_s, 4 * s.rtt)
                    and (s.confirmed or s.initiate_tries > FAST_TRIES)
                    and self._silence(s, now)))

    def seal_many(self, peer: str, plains: list[bytes], addr: Address, now: float,
                  out: list[tuple[bytes, Address]]) -> None:
        """:meth:`seal` each of ``plains`` (Exon datagrams for ``peer``, in order) into
        ``out``: the session is looked up, and its rules checked, once for all of them."""
        s = self._current.get(peer)
        if s is None or now >= s.reject_at or s.candidate is not None or len(plains) < 2:
            for plain in plains:
                self.seal(peer, plain, addr, now, out)
            return
        # The rules of seal, once: the count of unanswered datagrams only grows here, so the
        # last datagram's check is the one that holds if any does.
        s.unanswered += len(plains)
        if peer not in self._pending and self._renew_due(s, now):
            self._initiate(peer, addr, now)
        dest = s.addr
        counter = s.counter
        for pkt in s.seal.seal_many(s.remote_index, counter, plains):
            out.append((pkt, dest))
        s.counter = counter + len(plains)
        s.last_sent = now

    # ------------------------------------------------------------------ timers

    def handle_timer(self, now: float) -> None:
        """The sessions' and handshakes' timers due by ``now``, and the kept WELCOMEs past
        their time; nothing before the earliest of them (the native engine, which reads the
        two queues, does not call it then)."""
        timers = self._timers
        while timers and timers[0][0] <= now:
            t, _, obj = heapq.heappop(timers)
            if not obj.alive or obj.timer_at != t:
                continue
            obj.timer_at = INF
            if isinstance(obj, Initiation):
                self._initiation_timer(obj, now)
            else:
                self._session_timer(obj, now)
        if self._welcomes_order and self._welcomes_order[0][0] <= now:
            self._expire_welcomes(now)


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
            if not self._paced(s, now):
                return  # waiting for its slot of the node's first-probe pace (armed there)
            s.initiate_tries += 1
            self.stats.initiate_resends += 1
            self._control.append((s.initiate, s.addr))
            # (A busy responder, one that sent a RETRY: no fast tries, the resends double.)
            after = self._resend_after(s.initiate_tries + 1 + (FAST_TRIES if s.busy else 0))
            nxt = min(nxt, now + after)
        elif s.candidate is not None:
            if s.challenge_tries >= CHALLENGE_TRIES:
                s.candidate = None
                self.stats.paths_abandoned += 1
            else:
                self._challenge(s, now)
                return
        self._arm(s, nxt)
