"""The sending half: admission, envelopes, tokens, acknowledgements, loss recovery
(:mod:`a3m.exon.recovery` holds the per-path arithmetic) and the idle release.
"""

from __future__ import annotations

import itertools
from bisect import bisect_right
from typing import Any

from a3m.errors import Closed, MessageTooLarge, UsageError, WouldBlock
from a3m.exon import wire
from a3m.exon.events import ReceiptReady, Writable
from a3m.exon.records import INF, Message, SendRecord
from a3m.exon.recovery import PathRecovery
from a3m.exon.state import (
    _FLAG_FRAGMENT,
    _REQSLOTS,
    _REQSLOTS_PACK,
    _RETRANSMIT,
    _REVOKED,
    _REVOKED_PACK,
    _TOKEN,
    _TOKEN_FRAG_PACK,
    _TOKEN_PACK,
    MAX_PATHS,
    PROBE_TOKENS,
    ProtocolState,
    _copy_no,
)


def _within(starts: list[int], ranges: tuple[tuple[int, int], ...], s: int) -> bool:
    """Whether slot ``s`` is in ``ranges`` (sorted, their first slots in ``starts``)."""
    j = bisect_right(starts, s) - 1
    return j >= 0 and s < ranges[j][0] + ranges[j][1]


class SenderPart(ProtocolState):
    """Sending to peers: the send records."""

    def can_send(self, dst: str, nbytes: int = 0) -> bool:
        """Whether ``send(dst, ...)`` would be admitted now by both windows."""
        if self._closing:
            return False
        if dst == self.id:
            return True
        rec = self._sr.get(dst)
        pend = rec.pending if rec is not None else 0
        return (pend < self._peer_window(rec)
                and self._pending_total < self.config.window_global)

    def send_many(self, dst: str, payloads: list[bytes], now: float) -> int:
        """Queue the first of ``payloads`` that the windows admit, as :meth:`send` one by one
        would (no receipts), and return how many: 0 when the windows are full, when nothing
        was sent to ``dst`` yet, or when the first payload needs fragments (send those with
        :meth:`send`). The run stops before the first such payload. Never drops."""
        n = min(self.send_room(dst), len(payloads))
        if n == 0:
            return 0
        rec = self._sr[dst]
        single = rec.max_single
        queue = rec.queue
        count = 0
        for data in payloads[:n] if n < len(payloads) else payloads:
            if len(data) > single:
                break
            queue.append((bytes(data), None, None))
            count += 1
        if count:
            if len(queue) == count and not rec.tokens:
                rec.heard_at = now  # the record begins waiting on the peer
            rec.idle_since = None
            self._pending_total += count
            self._pump(rec, now)
        return count

    def send_room(self, dst: str) -> int:
        """How many more sends of one token each to ``dst`` both windows admit now (0 before
        the first send to it, and while closing)."""
        rec = self._sr.get(dst)
        if rec is None or self._closing:
            return 0
        return max(0, min(self._peer_window(rec) - rec.pending,
                          self.config.window_global - self._pending_total))

    def in_flight(self) -> int:
        """Pieces queued or unacknowledged across all destinations."""
        return self._pending_total

    def send(self, dst: str, payload: bytes, now: float, receipt: bool = False) -> int | None:
        """Queue ``payload`` for exactly-once delivery to node ``dst``.

        Returns a receipt id when ``receipt`` is true (a :class:`ReceiptReady` event follows
        once ``dst`` acknowledged the whole message). Raises :class:`WouldBlock` when a window
        is full (retry after a :class:`Writable` event or an acknowledgement) and
        :class:`MessageTooLarge` above ``config.max_message_size``. Never drops.
        """
        if self._closing:
            raise Closed("the Exon node is closing")
        cfg = self.config
        size = len(payload)
        if size > cfg.max_message_size:
            raise MessageTooLarge(f"{size} bytes > max_message_size {cfg.max_message_size}")
        rid: int | None = None
        if receipt:
            rid = self._next_receipt
            self._next_receipt += 1
        if dst == self.id:
            self._deliver(dst, bytes(payload))
            if rid is not None:
                self._events.append(ReceiptReady(rid))
            return rid
        rec = self._sr.get(dst)
        if rec is None:
            if self._pending_total >= cfg.window_global:
                self._blocked = True
                raise WouldBlock("global send window full")
            if not dst or len(dst.encode("utf-8")) > wire.MAX_ID_BYTES:
                raise UsageError(f"bad node id {dst!r}")
            rec = SendRecord(dst, self._clock.value, self._path(dst), now)
            rec.max_single = self.max_unfragmented(dst)
            self._sr[dst] = rec
            self.stats.send_records_created += 1
        elif (len(rec.queue) + len(rec.tokens) >= self._peer_window(rec)
              or self._pending_total >= cfg.window_global):
            self._blocked = True
            raise WouldBlock(f"send window to {dst!r} full")
        data = bytes(payload)
        if not rec.tokens and not rec.queue:
            rec.heard_at = now  # the record begins waiting on the peer: silence counts from here
        rec.idle_since = None
        if size <= rec.max_single:
            path = rec.path
            if (not rec.queue and rec.env_lo < rec.sck and path.inflight < path.cwnd
                    and path.pace_at <= now):
                # Fast path: an envelope is in hand, the window and the pacer have room:
                # out at once.
                s = rec.env_lo
                rec.env_lo = s + 1
                frame = _TOKEN_PACK(_TOKEN, 0, s, rec.rck, size) + data
                path.seq += 1
                rec.tokens[s] = (frame, rec.rck, rid, now, 1, path.seq)
                path.inflight += len(frame)
                if path.pacing_rate:
                    path.paced(len(frame), now)
                path.app_limited = True  # nothing queued behind it
                self._pending_total += 1
                self._emit(dst, frame)
                self.stats.tokens_sent += 1
                rec.last_sent = now
                t = now + path.pto
                if t < rec.timer_at:
                    self._schedule(rec, t)
                if rec.sck - rec.env_lo < (cfg.slots_ahead >> 1) and not rec.req_out:
                    self._request_slots(rec, now)
                return rid
            rec.queue.append((data, None, rid))
            self._pending_total += 1
        else:
            chunk = rec.max_single - (wire.FRAGMENT_OVERHEAD - wire.TOKEN_OVERHEAD)
            count = -(-size // chunk)
            rec.queue.extend(Message(data, chunk, count, rid).pieces())
            self._pending_total += count
        self._pump(rec, now)
        return rid

    def _path(self, peer: str) -> PathRecovery:
        """The loss-recovery state of the path to ``peer`` (kept beyond its send records, so a
        new record starts from what was measured before)."""
        path = self._paths.pop(peer, None)
        if path is None:
            cfg = self.config
            path = PathRecovery(cfg.rto_initial_s, cfg.ack_delay_s, self._backoff_cap,
                                self._limit(peer), cfg.pacing)
            if len(self._paths) >= MAX_PATHS + len(self._sr):  # (those with records stay)
                for old in [p for p in self._paths if p not in self._sr][:MAX_PATHS // 4]:
                    del self._paths[old]
        else:
            path.mds = self._limit(peer)
        path.inflight = 0  # a new record has nothing in flight
        path.largest_acked = path.seq
        path.pto_count = 0
        self._paths[peer] = path
        return path

    def _peer_window(self, rec: SendRecord | None) -> int:
        """Pieces queued or unacknowledged to one peer before ``send`` blocks: the configured
        window, or more when the congestion window holds more tokens (a long fat path), never
        beyond the global window."""
        cfg = self.config
        if rec is None or rec.path.cwnd_tokens <= cfg.window_per_peer:
            return cfg.window_per_peer
        return min(rec.path.cwnd_tokens, cfg.window_global)

    def srtt(self, peer: str) -> float | None:
        """The smoothed round trip to ``peer`` (None before any measure)."""
        path = self._paths.get(peer)
        return path.srtt if path is not None and path.sampled else None

    def max_peer_pto(self) -> float:
        """The largest probe timeout, without back-off, of the paths measured (0: none): how
        long a peer may take to send a lost token again (the runtime's exit linger)."""
        return max(map(self.peer_pto, self._paths), default=0.0)

    def peer_pto(self, peer: str) -> float:
        """The probe timeout of the path to ``peer`` without back-off (0 before any RTT
        sample): the secure layer's silence rule waits four of them (a loaded peer's queue
        is in them, so its slowness is not taken for a restart)."""
        path = self._paths.get(peer)
        if path is None or not path.sampled:
            return 0.0
        return path.base_pto()

    def max_unfragmented(self, peer: str) -> int:
        """The largest message to ``peer`` that travels as one token, in one datagram (a
        larger one is split into fragments, each recovered on its own)."""
        return self._limit(peer) - len(self._header(peer)) - wire.TOKEN_OVERHEAD

    def path_stats(self, peer: str) -> dict[str, float] | None:
        """RTT, probe timeout and congestion window of the path to ``peer`` (diagnostics)."""
        path = self._paths.get(peer)
        return None if path is None else path.snapshot()

    def _pump(self, rec: SendRecord, now: float) -> None:
        """Bind queued pieces to envelopes while the congestion window and the pacer have
        room, then keep envelopes coming. Held back by the pacer, the record's timer brings
        it back when the pacer's bucket holds half a quantum."""
        queue = rec.queue
        path = rec.path
        if queue and rec.env_lo < rec.sck and path.inflight < path.cwnd:
            allowed = path.pace_allowance(now, rec.max_single + wire.TOKEN_OVERHEAD)
            if allowed > 0:
                tokens = rec.tokens
                r = rec.rck
                s = rec.env_lo
                end = rec.sck
                cwnd = path.cwnd
                inflight = path.inflight
                seq = path.seq
                sent = 0
                peer = rec.peer
                out = self._out.get(peer)
                if out is None:
                    out = self._out[peer] = []
                emit = out.append
                pop = queue.popleft
                while queue and s < end and inflight < cwnd and allowed > 0:
                    data, frag, meta = pop()
                    if frag is None:
                        frame = _TOKEN_PACK(_TOKEN, 0, s, r, len(data)) + data
                    else:
                        msg: Message = meta  # (typed: the compiled build reads it natively)
                        index, count, total = frag
                        c = msg.chunk
                        i = index * c
                        data = msg.data[i:i + c]
                        if not msg.bound:
                            msg.r = r
                        msg.bound += 1
                        frame = _TOKEN_FRAG_PACK(_TOKEN, _FLAG_FRAGMENT, s, r, len(data),
                                                 index, count, total) + data
                    seq += 1
                    tokens[s] = (frame, r, meta, now, 1, seq)
                    inflight += len(frame)
                    allowed -= len(frame)
                    emit(frame)
                    s += 1
                    sent += 1
                if path.pacing_rate:
                    path.paced(inflight - path.inflight, now)
                rec.env_lo = s
                path.seq = seq
                path.inflight = inflight
                self.stats.tokens_sent += sent
                rec.last_sent = now
                self._schedule(rec, now + path.pto)
            if queue and rec.env_lo < rec.sck and path.inflight < path.cwnd:
                self.stats.pacer_holds += 1
                self._schedule(rec, path.pace_wake())  # the pacer holds the rest back
        if not queue:
            path.app_limited = True  # the queue ran dry: the window had room to spare
        if not rec.req_out and (queue or rec.sck - rec.env_lo < (self.config.slots_ahead >> 1)):
            self._request_slots(rec, now)

    def _request_slots(self, rec: SendRecord, now: float) -> bytes | None:
        """Ask for slots (again); returns the REQSLOTS frame sent (None: nothing wanted)."""
        cfg = self.config
        have = rec.sck - rec.env_lo
        ahead = cfg.slots_ahead
        if rec.path.cwnd_tokens > ahead:
            ahead = min(rec.path.cwnd_tokens, cfg.max_live_slots >> 1)
        want = min(ahead + len(rec.queue) - have, cfg.max_live_slots)
        if want <= 0:
            rec.req_out = False
            return None
        end = rec.sck + want
        if end > rec.req_end:
            rec.req_end = end
        self._clock.cover(rec.req_end)  # a restarted node never reuses a slot we may hold
        if not rec.req_out:
            rec.req_out = True
            rec.req_tx = 1
            rec.req_times = [now]
        else:
            rec.req_tx += 1
            if rec.req_tx <= 255:
                rec.req_times.append(now)
        frame = _REQSLOTS_PACK(_REQSLOTS, rec.sck, want, rec.lowest_in_use(),
                               _copy_no(rec.req_tx))
        self._emit(rec.peer, frame)
        self.stats.reqslots_sent += 1
        rec.req_sent_at = now
        rec.last_sent = now
        self._schedule(rec, now + rec.path.pto)
        return frame

    def _on_slots(self, src: str, s: int, r: int, n: int, ack_delay_us: int, echo: int,
                  now: float) -> None:
        rec = self._sr.get(src)
        if n == 0:
            # A receive record probing: tell it what it may drop.
            if rec is None:
                ck = self._clock.value
                self._emit(src, _REQSLOTS_PACK(_REQSLOTS, ck, 0, ck, 0))
            else:
                self._emit(src, _REQSLOTS_PACK(_REQSLOTS, rec.sck, 0, rec.lowest_in_use(), 0))
            return
        if rec is None:
            # Slots for a record we discarded: release them (our clock is above them).
            ck = self._clock.value
            self._emit(src, _REQSLOTS_PACK(_REQSLOTS, ck, 0, ck, 0))
            self.stats.stale_frames += 1
            return
        if s != rec.sck or r < rec.rck or r <= rec.closed_r:
            # Another range, or a record older than ours or revoked/voided (receive records
            # of one peer follow each other with growing r: an older one is gone).
            self.stats.stale_frames += 1
            return
        n = min(n, rec.req_end - s)
        if n <= 0:
            self.stats.stale_frames += 1
            return
        path = rec.path
        path.set_peer_ack_delay(min(ack_delay_us, 1_000_000) / 1_000_000)
        if rec.req_out and echo:
            # The SLOTS names the copy it answers: its round trip is a sample, whichever copy
            # (under a receiver's queue longer than the probe timeout, every answer is to an
            # older copy: without them the path would never be measured).
            if echo == _copy_no(rec.req_tx):
                path.on_rtt_sample(now - rec.req_sent_at)
            elif echo <= len(rec.req_times):
                path.on_rtt_sample(now - rec.req_times[echo - 1])
        rec.req_out = False
        path.on_progress()
        if rec.queue and rec.env_lo >= rec.sck:
            self.stats.slot_stalls += 1  # pieces waited for this grant (none in hand)
        if r != rec.rck:
            old = rec.rck
            rec.rck = r
            if old >= 0:
                # A new receive record: the one before it is gone, and its envelopes with it
                # (the receiver restarted; within one incarnation a record holding live slots
                # or a partial message is never discarded).
                rec.env_lo = s
                self._requeue_partial_head(rec, old)
        rec.sck = s + n
        self._pump(rec, now)

    def _on_ack(self, src: str, r: int, ranges: tuple[tuple[int, int], ...],
                copies: tuple[tuple[int, int], ...] | None, now: float) -> None:
        rec = self._sr.get(src)
        if rec is None:
            return
        tokens = rec.tokens
        acked = 0
        nbytes = 0
        sample_at = -1.0  # sent time of the newest token acked, if a first transmission
        largest = -1  # largest transmission sequence among them
        reordered = False
        fresh = False  # a first transmission among them
        last_copy = -1.0  # when the newest copy of the resent ones among them left
        path = rec.path
        prev_largest = path.largest_acked
        spurious = 0  # needless retransmissions that show reordering
        needless = 0
        # Which copy arrived (the receiver says so: docs/exon-wire.md, ACK). A token sent again
        # of which only the first copy arrived credits that copy's transmission (number and
        # time), never the later copy's: that number would make every token sent between the
        # two look overtaken, and lost (issue 31). When the ACK does not say (a record the
        # receiver no longer holds), or a token went three times or more, two guesses stand
        # in: a copy acknowledged sooner than the least round trip after it left was not what
        # arrived, and one acknowledged within half of it was needless.
        starts = [f for f, _ in copies] if copies else None
        spurious_within = path.min_rtt / 2 if path.sampled else 0.0
        too_soon = path.min_rtt if path.sampled else 0.0
        first_tx = rec.first_tx
        # Receipts progress once per run of tokens of one message (a fragmented message's
        # fragments are acknowledged together), not once per token.
        run_meta: Any = None
        run = 0
        lowest = next(iter(tokens), None)  # tokens are in slot order
        if lowest is None:
            self.stats.stale_frames += 1
            return
        for first, count in ranges:
            end = first + count
            if end <= lowest:
                continue  # repeated for slots acknowledged long ago
            if first < lowest:
                first, count = lowest, end - lowest
            if count > 4 * len(tokens) + 8:
                slots: Any = []  # tokens are in slot order: stop past the range
                for x in tokens:
                    if x >= end:
                        break
                    if x >= first:
                        slots.append(x)
            else:
                slots = range(first, end)
            for s in slots:
                tok = tokens.get(s)
                if tok is not None and tok[1] == r:
                    del tokens[s]
                    acked += 1
                    nbytes += len(tok[0])
                    tx = tok[4]
                    if tx == 1:
                        fresh = True
                        if tok[5] > largest:
                            largest = tok[5]
                            sample_at = tok[3]
                        if tok[5] < prev_largest:
                            reordered = True  # overtaken by a later transmission
                    else:
                        if tok[3] > last_copy:
                            last_copy = tok[3]
                        orig = first_tx.pop(s, None)
                        if copies is None:
                            if tok[5] > largest and now - tok[3] >= too_soon:
                                largest = tok[5]
                                sample_at = -1.0  # which copy arrived is not known
                            if now - tok[3] < spurious_within:
                                spurious += 1  # acked too soon after the copy: the first
                                needless += 1  # was late
                        elif starts is None or not _within(starts, copies, s):
                            # Only the first copy arrived: its transmission is the one
                            # acknowledged (and measured), and each copy sent again was
                            # needless. Declared lost, it was only late: reordering evidence
                            # (RACK's DSACK). Sent by a probe, its ACK was late or lost: no
                            # evidence of reordering.
                            needless += 1
                            if orig is not None:
                                if orig[2]:
                                    spurious += 1
                                if orig[1] > largest:
                                    largest = orig[1]
                                    sample_at = orig[0]
                        elif tx == 2:
                            # The only copy sent again arrived: Karn's ambiguity is gone.
                            if tok[5] > largest:
                                largest = tok[5]
                                sample_at = tok[3]
                        elif tok[5] > largest and now - tok[3] >= too_soon:
                            largest = tok[5]  # one of the copies sent again: which is
                            # not known
                            sample_at = -1.0
                    meta = tok[2]
                    if meta is not None:
                        if meta is run_meta:
                            run += 1  # the next fragment of the same message
                        else:
                            if run:
                                self._receipt_progress(run_meta, run)
                            run_meta, run = meta, 1
        if run:
            self._receipt_progress(run_meta, run)
        if not acked:
            self.stats.stale_frames += 1
            return
        self._pending_total -= acked
        if rec.revoked >= 0:
            self._check_revoked(rec)
        if reordered:
            path.on_reordering()
        if needless:
            self.stats.spurious_retransmits += needless
        if spurious:
            path.on_spurious()
        if (not fresh and sample_at < 0 and last_copy >= 0
                and now - last_copy > path.base_pto()):
            # Only resent tokens, no copy known to be the one that arrived, and even the
            # newest copy among them left longer ago than the path's timeout: whichever copy
            # this answers, the round trip is at least that long. Taken as a sample (a lower
            # bound): a path whose round trip grew past its timeout (a loaded receiver's
            # queue) is otherwise never measured again (every token is resent before its ACK
            # comes) and resends every message several times, for ever. On a lossy path the copy that got through is
            # answered within the timeout: nothing changes there.
            path.on_rtt_sample(now - last_copy)
        path.on_progress()
        events = path.congestion_events
        path.on_acked(nbytes, now, acked)
        if path.congestion_events != events:
            self.stats.congestion_events += path.congestion_events - events
        # The largest acknowledged transmission moves, and the round trip is measured, once
        # the whole datagram is read (_detect_acked): its ACK frames together are one ACK.
        seen = self._ack_detect.get(rec)
        if seen is None or largest > seen[0]:
            self._ack_detect[rec] = (largest, sample_at)
        if rec.queue:
            self._pump(rec, now)
        elif not tokens:
            if first_tx:
                first_tx.clear()  # (tokens that left by VOID, REVOKE or abandon)
            rec.idle_since = now
            rec.loss_time = INF
            if self._closing:
                self._release(rec, now)
            elif rec.req_out:
                self._schedule(rec, now + self.config.idle_release_s)  # (its probe stays)
            else:  # nothing to probe for any more: the next duty is the idle release
                self._reschedule(rec, now + self.config.idle_release_s)
        if self._blocked:
            self._blocked = False
            self._events.append(Writable())

    def _detect_acked(self, now: float) -> None:
        """For each record the datagram just read acknowledged tokens of: move the largest
        acknowledged transmission, take the round-trip sample, then detect losses. An ACK with
        more ranges than a frame holds comes as several frames, and one ACK's tokens come in
        up to three (by how they arrived): read frame by frame, a retransmitted token in one
        would make the tokens the next acknowledges look lost, or a first transmission long
        unacknowledged in one would measure its wait where a probe's copy in the next
        answers the question."""
        recs = self._ack_detect
        for rec, (largest, sample_at) in recs.items():
            path = rec.path
            if largest > path.largest_acked:
                if sample_at >= 0:
                    # QUIC's rule: a sample only from an ACK that moves the largest
                    # acknowledged transmission on (an ACK repeated for an older token would
                    # measure the delay of the repeat, not the path).
                    path.on_rtt_sample(now - sample_at)
                path.largest_acked = largest
            if rec.alive and rec.tokens:
                self._detect_losses(rec, now)
        recs.clear()

    def _detect_losses(self, rec: SendRecord, now: float) -> None:
        """Declare lost, and send again at once, each token acknowledged transmissions overtook
        (QUIC's packet threshold: one sent 3 transmissions later was acknowledged; or its
        time threshold: one sent later was acknowledged and it is older than 9/8 RTT); arm
        the loss timer for the next one that may become lost by time.

        Tokens are in slot order, and first transmissions go out in slot order: the scan
        stops at the first token sent for the first time after the largest acknowledged one
        (every later token was sent later still)."""
        path = rec.path
        largest = path.largest_acked
        threshold = path.packet_threshold
        delay = path.loss_delay()
        loss_time = INF
        lost: list[int] = []
        tokens = rec.tokens
        for s, tok in tokens.items():
            seq = tok[5]
            if seq > largest:
                if tok[4] == 1:
                    break
                continue
            t = tok[3] + delay  # (one expression for both tests: a timer due now must fire)
            if largest - seq >= threshold or t <= now:
                lost.append(s)
            elif t < loss_time:
                loss_time = t
        rec.loss_time = loss_time
        if lost:
            self.stats.fast_retransmits += len(lost)
            path.on_lost(self._resend(rec, lost, now, True))
            rec.last_sent = now
            self._schedule(rec, now + path.pto)
        if loss_time < rec.timer_at:
            self._schedule(rec, loss_time)

    def _receipt_progress(self, meta: Any, n: int = 1) -> None:
        """``n`` tokens of the message ``meta`` (a receipt id, or a fragmented
        :class:`Message`) were acknowledged."""
        if isinstance(meta, int):
            self._events.append(ReceiptReady(meta))
            return
        msg: Message = meta
        msg.remaining -= n
        if msg.remaining == 0 and msg.rid is not None:
            self._events.append(ReceiptReady(msg.rid))

    def _send_timer(self, rec: SendRecord, now: float) -> None:
        cfg = self.config
        path = rec.path
        tokens = rec.tokens
        if not tokens:
            rec.loss_time = INF  # (tokens may also leave by VOID, REVOKE or abandon)
        elif rec.loss_time <= now:
            self._detect_losses(rec, now)
        if rec.queue:
            self._pump(rec, now)  # what the pacer held back (or it sets its timer again)
        if tokens or rec.req_out:
            due = rec.last_sent + path.pto
            if now >= due:
                sec = self._sec
                if sec is not None and sec.holding(rec.peer):
                    # Nothing left: it waits for the handshake, whose own resends stand for
                    # the probe (a copy would only join the queue and leave with the rest).
                    # The probe timeout starts again once the session is up.
                    rec.last_sent = now
                    rec.held_probes += 1
                    due = now + path.pto
                elif path.sampled or self._paced(rec, now):
                    self._probe(rec, now)
                    due = now + path.pto
                else:
                    due = rec.probe_slot  # a first exchange's probe, waiting for its slot
            next_t = due
        else:
            next_t = INF
        if rec.loss_time < next_t:
            next_t = rec.loss_time
        if not tokens and not rec.queue:
            if rec.idle_since is None:
                rec.idle_since = now
            idle_due = rec.idle_since + cfg.idle_release_s
            if now >= idle_due or self._closing:
                self._release(rec, now)
                return
            next_t = min(next_t, idle_due)
        elif self._peer_timeout and not rec.silent:
            due = rec.heard_at + self._peer_timeout
            if now >= due:
                self._silent(rec, now)
                if not rec.alive:
                    return  # abandoned (the node is closing)
            elif due < next_t:
                next_t = due
        self._schedule(rec, next_t)

    def _paced(self, rec: SendRecord, now: float) -> bool:
        """Whether the probe of ``rec``, a first exchange (no RTT sample to its peer yet), may
        go now: its reserved slot of the node's pace came, or the pace has room (else a slot
        is reserved for it: ``rec.probe_slot``)."""
        held = rec.probe_slot
        t = rec.probe_slot = self._pacer.admit(held, now, rec.path.pto)
        if t and t != held:
            self.stats.probes_deferred += 1
        return not t

    def _probe(self, rec: SendRecord, now: float) -> None:
        """The probe timeout expired with nothing acknowledged since: send the oldest token or
        two again (their ACK, or the ACK of the copies it overtakes, tells which others were
        lost) and the slot request if one is out; the timeout doubles."""
        path = rec.path
        self.stats.probe_timeouts += 1
        if path.on_pto():
            self.stats.congestion_events += 1
        solo: bytes | None = None
        if rec.tokens:
            slots = list(itertools.islice(rec.tokens, PROBE_TOKENS))
            self._resend(rec, slots, now, False)
            solo = rec.tokens[slots[0]][0]  # the oldest: what the rest waits on
        if rec.req_out:
            self.stats.reqslots_retransmits += 1
            req = self._request_slots(rec, now)
            if not rec.tokens:
                solo = req
        if solo is not None:
            # The probe's oldest token (or its slot request) goes twice, the second copy in
            # a datagram of its own (RFC 9002 allows two per probe timeout): at 35 % loss
            # each way a round trip then gets through with p = 0.67 instead of 0.42.
            self._solo.append((rec.peer, solo))
            self.stats.probe_copies += 1
        rec.last_sent = now

    def _resend(self, rec: SendRecord, slots: list[int], now: float, lost: bool) -> int:
        """Send the tokens of ``slots`` again, flagged RETRANSMIT, each with the next
        transmission number; returns their bytes. ``lost``: they were declared lost (else a
        probe sends them)."""
        tokens = rec.tokens
        path = rec.path
        seq = path.seq
        emit = self._emit
        peer = rec.peer
        nbytes = 0
        first_tx = rec.first_tx
        for s in slots:
            frame, r, meta, sent_at, tx, last_seq = tokens[s]
            if tx == 1:
                first_tx[s] = (sent_at, last_seq, lost)  # the ACK may say this copy arrived
            nbytes += len(frame)
            frame = _RETRANSMIT(frame)
            seq += 1
            tokens[s] = (frame, r, meta, now, tx + 1, seq)
            emit(peer, frame)
        path.seq = seq
        self.stats.retransmits += len(slots)
        return nbytes

    def _session_ready(self, peer: str, now: float, held: bool) -> None:
        """The secure layer installed a session with ``peer``: what it held for the handshake
        leaves now. Probe timeouts that expired meanwhile sent nothing (their copies waited in
        the handshake's queue), so the back-off starts again and the probe timeout runs from
        now, as for a first transmission: a handshake that took 3 s must not leave the first
        REQSLOTS on a 2 s back-off."""
        path = self._paths.get(peer)
        if path is not None:
            if path.pto_count:
                path.on_progress()
            sec = self._sec
            if sec is not None:
                if sec.loaded(peer):
                    path.set_loaded()  # it sent a RETRY: back off from the first probe
                path.seed_pto(sec.handshake_rtt(peer))
        rec = self._sr.get(peer)
        if rec is not None and rec.alive and (rec.tokens or rec.req_out):
            rec.last_sent = now
            if held:
                self._left_now(rec, now)
                if rec.held_probes and rec.req_out:
                    # A probe came due meanwhile: its copies go with what was held, as a
                    # probe sends them (the request again, and once more in a datagram of
                    # its own), not one pair per timeout that expired.
                    self.stats.reqslots_retransmits += 1
                    frame = self._request_slots(rec, now)
                    if frame is not None:
                        self._solo.append((rec.peer, frame))
                        self.stats.probe_copies += 1
            rec.held_probes = 0
            self._schedule(rec, now + rec.path.pto)

    def _left_now(self, rec: SendRecord, now: float) -> None:
        """What the handshake held left now: round trips count from here (a sample from when
        it was queued would count the handshake as path delay)."""
        if rec.req_out:
            rec.req_sent_at = now
            rec.req_times = [now] * len(rec.req_times)
        tokens = rec.tokens
        for s, tok in tokens.items():
            tokens[s] = (tok[0], tok[1], tok[2], now, tok[4], tok[5])

    def _release(self, rec: SendRecord, now: float) -> None:
        """Discard an idle send record, giving back every slot it holds or asked for."""
        end = max(rec.sck, rec.req_end)
        self._clock.advance_to(end)
        self._emit(rec.peer, _REQSLOTS_PACK(_REQSLOTS, end, 0, end, 0))
        if rec.revoked >= 0:
            self._emit(rec.peer, _REVOKED_PACK(_REVOKED, rec.revoked, 0))
        rec.alive = False
        del self._sr[rec.peer]
        self.stats.send_records_discarded += 1
        if self._closing:
            self._released.add(rec.peer)
            self._check_closed(now)
