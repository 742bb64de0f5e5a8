"""The initiator's side of the handshake (Noise XX, ``docs/exon-wire.md``): HELLO out, RETRY
(prove your address) and WELCOME in, INITIATE out; what was queued for the peer leaves
sealed under the new session. The only handshake state a node keeps is its own
:class:`~a3m.exon.secure.state.Initiation`.
"""

from __future__ import annotations

import struct

from a3m.exon.events import KeyRefused
from a3m.exon.secure import handshake as hs
from a3m.exon.secure import packets as p
from a3m.exon.secure.keys import NodeKey
from a3m.exon.secure.noise import HandshakeError
from a3m.exon.secure.paths import PathsPart
from a3m.exon.secure.session import INF, Session
from a3m.exon.secure.state import (
    FAST_TRIES,
    HANDSHAKE_GIVE_UP_S,
    MAX_PENDING,
    Address,
    Initiation,
)


class InitiatorPart(PathsPart):
    """Handshakes this node starts, resends and completes."""

    def _initiate(self, peer: str, addr: Address, now: float) -> Initiation | None:
        if len(self._pending) >= MAX_PENDING:
            return None
        old = self._pending.pop(peer, None)
        if old is not None:
            old.alive = False
            self._pending_by_index.pop(old.index, None)
        index = self._fresh_index()
        e = NodeKey.generate(self._entropy)
        sym, msg1 = hs.hello(e, peer, index)
        init = Initiation(peer, index, e, sym, msg1, addr, now)
        self._pending[peer] = init
        self._pending_by_index[index] = init
        self.stats.handshakes_started += 1
        self._control.append((init.hello(), addr))
        self._arm(init, now + self._timeout)
        return init


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
        init.sent_at = now  # the HELLO with the token is the one now awaited
        # A RETRY says the responder is past its handshake rate (busy), not that the path
        # loses: the fast tries (made for loss) end, the resends double from here, so a
        # fleet that started at once does not keep a loaded responder five times busier.
        if init.tries <= FAST_TRIES:
            init.tries = FAST_TRIES + 1
        init.paced_at = 0.0
        init.timer_at = INF  # (the entry for the earlier deadline goes stale)
        self._arm(init, now + self._resend_after(init.tries))


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
        s.busy = bool(init.token)  # it sent us a RETRY: loaded
        s.rtt_sample = now - init.sent_at  # (from the newest copy: a lower bound)
        st.handshakes_completed += 1
        self._install(s, now)
        self._control.append((s.initiate, s.addr))
        self._arm(s, now + self._resend_after(1 + (FAST_TRIES if s.busy else 0)))
        for plain in init.queue:
            self._control.append((self._seal(s, p.DATA, plain, now), s.addr))
        if self._on_session is not None:
            self._on_session(s.peer, now, bool(init.queue))
        if addr != s.addr:
            self._moved(s, addr, True, len(data), now)


    def _end_pending(self, init: Initiation) -> None:
        init.alive = False
        if self._pending.get(init.peer) is init:
            del self._pending[init.peer]
        self._pending_by_index.pop(init.index, None)


    def _resend_after(self, tries: int) -> float:
        """The wait before resend number ``tries`` (1 = the first resend) of HELLO or
        INITIATE: ``timeout_s`` for FAST_TRIES resends, then doubling up to the cap."""
        if tries <= FAST_TRIES:
            return self._timeout
        wait: float = self._timeout * (1 << min(tries - FAST_TRIES, 16))
        return min(wait, self._backoff_cap)


    def _initiation_timer(self, init: Initiation, now: float) -> None:
        if now - init.last_used >= HANDSHAKE_GIVE_UP_S:
            self._end_pending(init)
            self.stats.handshakes_abandoned += 1
            return
        if not self._paced(init, now):
            return  # a first exchange's resend, waiting for its slot of the node's pace
        self.stats.hello_resends += 1
        init.sent_at = now
        self._control.append((init.hello(), init.addr))
        self._arm(init, now + self._resend_after(init.tries))
        init.tries += 1

