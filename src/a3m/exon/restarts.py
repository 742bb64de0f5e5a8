"""Receiver restarts, sender side: VOID (a record of an earlier incarnation is gone) and
REVOKE/REVOKED (a closing receiver takes back its envelopes); messages proven undelivered
are sent again whole, the others reported (``docs/exon-wire.md``, "Restarts").
"""

from __future__ import annotations

from typing import Any

from a3m.exon import wire
from a3m.exon.events import NotDelivered, OutcomeUnknown
from a3m.exon.receiver import ReceiverPart
from a3m.exon.records import Message, SendRecord
from a3m.exon.state import _REQSLOTS, _REQSLOTS_PACK, _REVOKED, _REVOKED_PACK


class RestartsPart(ReceiverPart):
    """A receiver's restart or close as its senders see it."""

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
