"""Graceful close and the linger that follows it (``docs/exon-wire.md``, "Closing: the
linger").
"""

from __future__ import annotations

from a3m.exon.restarts import RestartsPart
from a3m.exon.state import _REQSLOTS, _REQSLOTS_PACK, _REVOKE, _REVOKE_PACK, _Linger


class ClosingPart(RestartsPart):
    """Closing this node, and lingering after."""

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
                and not self._acks and self._exon_timer() is None)

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
