"""Peer liveness: a peer silent while it holds our messages is reported, and can be given
up (``docs/exon-wire.md``, "Peer liveness").
"""

from __future__ import annotations

from a3m.exon import wire
from a3m.exon.closing import ClosingPart
from a3m.exon.events import PeerReachable, PeerUnreachable, Writable
from a3m.exon.records import Message, SendRecord
from a3m.exon.state import MAX_UNREACHABLE


class LivenessPart(ClosingPart):
    """Peers that stop answering."""

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
