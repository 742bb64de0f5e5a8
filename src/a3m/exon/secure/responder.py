"""The responder's side of the handshake: a stateless answer to HELLO (the responder's
ephemeral key travels sealed in the cookie, CurveZMQ's way) and a session only at a valid
INITIATE, and the budgets that keep a flood cheap: per source under load, RETRYs in all,
key exchanges for token-less HELLOs (``docs/exon-wire.md``, "Under load").
"""

from __future__ import annotations

import struct

from a3m.exon.events import KeyRefused
from a3m.exon.secure import handshake as hs
from a3m.exon.secure import packets as p
from a3m.exon.secure.cookies import COOKIE_LIFETIME_S
from a3m.exon.secure.initiator import InitiatorPart
from a3m.exon.secure.keys import KEY_BYTES, NodeKey
from a3m.exon.secure.meter import HANDSHAKE_BURST_S, RETRY, SHED
from a3m.exon.secure.noise import HandshakeError
from a3m.exon.secure.session import Session
from a3m.exon.secure.state import (
    MAX_PROVEN,
    MAX_SESSIONS,
    MAX_WELCOMES,
    PROVEN_RATE,
    PROVEN_S,
    WELCOME_REPEAT_S,
    Address,
)


def _addr_bytes(addr: Address) -> bytes:
    return repr(addr).encode()



class ResponderPart(InitiatorPart):
    """Answers handshakes peers start, within the budgets."""

    def _source_ok(self, addr: Address, now: float) -> bool:
        """Under load, take one from the budget of the source ``addr`` counts as (False: it
        is spent; counted ``unauth_shed``): ``HandshakeMeter.source_ok``."""
        if self._meter.source_ok(addr, now, 1.0):
            return True
        self.stats.unauth_shed += 1
        return False

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


    def _on_hello(self, data: bytes | memoryview, addr: Address, now: float,
                  verdict: int = -1) -> None:
        """A HELLO. ``verdict``: the meter's for a token-less one, when the native loop took
        it already (``open_hello``); -1: take it here."""
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
            if verdict < 0:
                verdict = self._meter.hello(addr, now)
            if verdict == SHED:
                st.unauth_shed += 1
                return
            busy = verdict == RETRY
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
            if self._welcome_again(bound, addr, now):
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
        if not tlen and self._welcome_again(bound, addr, now):
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
        welcome = p.WELCOME_HDR.pack(p.VERSION, p.WELCOME, index_i) + msg2
        self._control.append((welcome, addr))
        self._keep_welcome(bound, welcome, now)

    def _welcome_again(self, bound: bytes, addr: Address, now: float) -> bool:
        """A HELLO answered lately (the same address, e and index): send its WELCOME again,
        with no second key exchange (True), else False."""
        got = self._welcomes.get(bound)
        if got is None or got[0] < now:
            return False
        self.stats.welcomes_repeated += 1
        self._control.append((got[1], addr))
        return True

    def _keep_welcome(self, bound: bytes, welcome: bytes, now: float) -> None:
        """Remember ``welcome`` for repeats of its HELLO (WELCOME_REPEAT_S, MAX_WELCOMES at
        most: the oldest go first; every entry lives as long, so they expire in order)."""
        kept = self._welcomes
        order = self._welcomes_order
        self._expire_welcomes(now, MAX_WELCOMES - 1)
        t = now + WELCOME_REPEAT_S
        kept[bound] = (t, welcome)
        order.append((t, bound))

    def _expire_welcomes(self, now: float, room: int = MAX_WELCOMES) -> None:
        """Forget the WELCOMEs kept past their time, and the oldest beyond ``room`` (from the
        front of the order: every entry lives as long). Runs on a new entry and on the
        layer's timer (``next_timer`` includes the oldest entry's end), so an idle node keeps
        none past WELCOME_REPEAT_S."""
        kept = self._welcomes
        order = self._welcomes_order
        while order and (order[0][0] <= now or len(kept) > room):
            t, k = order.popleft()
            got = kept.get(k)
            if got is not None and got[0] == t:
                del kept[k]


    def _on_initiate(self, data: bytes | memoryview, addr: Address, now: float) -> None:
        st = self.stats
        head = p.INITIATE_HDR.size
        if len(data) < head + KEY_BYTES + hs.COOKIE_BYTES:
            st.truncated += 1
            return
        _, _, index_i = p.INITIATE_HDR.unpack_from(data)
        e_i = bytes(data[head:head + KEY_BYTES])
        bound = _addr_bytes(addr) + e_i + hs.INDEX.pack(index_i)
        # The cookie first: one AEAD open, and a forged INITIATE (or one bound to another
        # address, or too old) changes nothing, not even a source's budget (the native reads
        # refuse it so, before any Python: ``CookieKeys``).
        cookie = bytes(data[head + KEY_BYTES:head + KEY_BYTES + hs.COOKIE_BYTES])
        opened = self._jar.open(cookie, bound, now)
        if opened is None:
            st.cookie_invalid += 1  # forged, from another address, or too old
            return
        done = self._completed.get(e_i)
        if done is not None:
            # A repeat: our first answer under the session it made was lost or is late (a
            # busy node), or it comes from another address (its cookie valid there). Answer
            # under that session again, with no budget and no key exchange: a loaded
            # responder's queue holds many of these.
            st.handshake_repeats += 1
            s0 = done[1]
            if s0.alive:
                self._control.append((self._seal(s0, p.DATA, b"", now), s0.addr))
            return
        until = self._proven.get(addr)
        if ((until is None or now >= until) and bound not in self._welcomes
                and not self._source_ok(addr, now)):
            # (An INITIATE for a WELCOME we made lately, or from a proven address, skips
            # its source's budget: under load, resends of those from a fleet behind one
            # address would spend it, and the fleet's HELLOs would get no RETRY.)
            return
        e_priv, r_index, made = opened
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
            self._on_session(peer, now, False)


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

