"""The receiving half: slot grants, delivery and reassembly, ACKs, probes of a silent
sender, and the buffer space that paces grants.
"""

from __future__ import annotations

from typing import Any, Final

from a3m.exon import wire
from a3m.exon.events import Delivered
from a3m.exon.records import INF, Reassembly, RecvRecord
from a3m.exon.sender import SenderPart
from a3m.exon.state import (
    _RANGE_SIZE,
    _REVOKE,
    _REVOKE_PACK,
    _SLOTS,
    _SLOTS_PACK,
    _VOID,
    _VOID_PACK,
)

#: ACKs repeat the slots consumed within this many below the highest received (so a lost ACK
#: is repeated by the next ones; see ``_reack_ranges``).
REACK_SPAN: Final = 1024


class ReceiverPart(SenderPart):
    """Receiving from peers: the receive records and the ACKs they owe."""

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

    def _flush_acks(self, only: Any = None) -> None:
        """Emit the pending ACKs (of the peers in ``only``, when given: piggybacking)."""
        acks = self._acks
        peers = list(acks) if only is None else [p for p in only if p in acks]
        for peer in peers:
            per_r = acks.pop(peer)
            budget = min(self._limit(peer), self._mds) - 300  # room for the header
            max_ranges = max(1, (budget - wire.ack_size(0, 0)) // _RANGE_SIZE)
            rr = self._rr.get(peer)
            for r, slots in per_r.items():
                if rr is not None and rr.rck == r:
                    ranges = self._reack_ranges(rr, slots)
                    for chunk, marked in self._with_copies(rr, ranges, max_ranges):
                        self._emit(peer, wire.encode_ack(r, chunk, marked))
                    continue
                # A record no longer held (duplicates): how its tokens arrived is not known.
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

    @staticmethod
    def _with_copies(rr: RecvRecord, ranges: list[tuple[int, int]], max_ranges: int
                     ) -> list[tuple[list[tuple[int, int]], list[tuple[int, int]]]]:
        """The ACK frames for record ``rr``: ``(ranges, copy ranges)`` pairs, each within
        ``max_ranges`` ranges in all. The copy ranges are the slots of the frame's ranges
        where a copy sent again arrived (``rr.copies``); docs/exon-wire.md, ACK. Then forget
        the copies below the span ACKs repeat."""
        copies = rr.copies
        if not copies:
            return [(ranges[i:i + max_ranges], []) for i in range(0, len(ranges), max_ranges)]
        cap = max(2, max_ranges)
        marks = sorted(copies)
        items: list[tuple[tuple[int, int], list[tuple[int, int]]]] = []
        i, n = 0, len(marks)
        for f, c in ranges:
            end = f + c
            while i < n and marks[i] < f:
                i += 1
            start = f
            inside: list[tuple[int, int]] = []
            while i < n and marks[i] < end:
                x = marks[i]
                i += 1
                if inside and inside[-1][0] + inside[-1][1] == x:
                    inside[-1] = (inside[-1][0], inside[-1][1] + 1)
                    continue
                if len(inside) == cap - 1:  # a frame holds the range and cap - 1 of these
                    items.append(((start, x - start), inside))
                    start, inside = x, []
                inside.append((x, 1))
            items.append(((start, end - start), inside))
        out: list[tuple[list[tuple[int, int]], list[tuple[int, int]]]] = []
        chunk: list[tuple[int, int]] = []
        marked: list[tuple[int, int]] = []
        size = 0
        for rng, inside in items:
            if chunk and size + 1 + len(inside) > cap:
                out.append((chunk, marked))
                chunk, marked, size = [], [], 0
            chunk.append(rng)
            marked.extend(inside)
            size += 1 + len(inside)
        out.append((chunk, marked))
        floor = max(rr.high - REACK_SPAN, rr.first)
        if marks[0] < floor:
            rr.copies = {x for x in copies if x >= floor}
        return out

    @staticmethod
    def _reack_ranges(rr: RecvRecord, slots: list[int]) -> list[tuple[int, int]]:
        """The ranges of an ACK for record ``rr``: the slots just consumed, and again every
        slot consumed within ``REACK_SPAN`` below the highest received: below ``low`` as one
        range (every slot below ``low`` was delivered, released or never granted: a sender
        holds no undelivered token there), above it the consumed slots one by one. An ACK
        lost (alone, or with the reply it rode on) is repeated by the next ones, instead of
        its tokens being taken for lost and sent again. Measured, one-way stream at 5 % loss
        with ~600 tokens in flight: without the repeat above ``low``, 85 k needless
        retransmissions for 30 k messages; repeating only the previous flush's slots was not
        enough (two lost ACKs in a row, then an avalanche of tiny flushes). The sender skips
        repeated slots below its lowest token at no cost."""
        low = rr.low
        floor = max(rr.high - REACK_SPAN, rr.first)
        extra = [s for s in slots if s >= low or s < floor]
        dead = rr.dead
        if dead:
            extra.extend(x for x in range(max(low, floor), rr.high) if x in dead)
        ranges = wire.to_ranges(extra)
        if floor < low:
            ranges.append((floor, low - floor))
            ranges.sort()
            merged: list[tuple[int, int]] = []
            for first, count in ranges:
                if merged and first <= merged[-1][0] + merged[-1][1]:
                    f0, c0 = merged[-1]
                    merged[-1] = (f0, max(c0, first + count - f0))
                else:
                    merged.append((first, count))
            ranges = merged
        return ranges

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
