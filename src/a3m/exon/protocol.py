"""The Exon protocol as a sans-I/O state machine (:class:`ExonProtocol`).

Per message, the sender holds an envelope (a slot the receiver granted with SLOTS in answer to
REQSLOTS), sends the payload as a TOKEN bound to that slot and to the receive record's
incarnation, and retransmits it until the ACK. The receiver delivers a token only while its slot
is live and consumes the slot in the same step. Half-connections are created on demand and
discarded when idle; the node clock is the only lasting state. Rules and their reasons are in
``docs/design.md`` and ``docs/exon-wire.md``.

The object does no I/O: feed it datagrams, the current time and timer expiries; take from it
datagrams to send, events and the next deadline.

This module is the frame dispatcher; the rules live in one module per part: ``sender``
(admission, tokens, ACKs, loss recovery with ``recovery``), ``receiver`` (grants, delivery,
ACKs owed), ``restarts`` (VOID, REVOKE), ``closing`` (close and linger), ``liveness`` (silent
peers), on the shared ``state``.
"""

from __future__ import annotations

import heapq
import struct
from collections.abc import Callable
from typing import Final

from a3m._dataplane import native as _native
from a3m.errors import UsageError
from a3m.exon import wire
from a3m.exon.events import Delivered, Event
from a3m.exon.liveness import LivenessPart
from a3m.exon.records import INF, RecvRecord, SendRecord
from a3m.exon.secure import parse_public_key
from a3m.exon.secure.packets import DATA as _DATA
from a3m.exon.secure.packets import SEALED_OVERHEAD
from a3m.exon.secure.packets import VERSION as _VERSION
from a3m.exon.state import (
    _ACK,
    _FLAG_RETRANSMIT,
    _REQSLOTS,
    _REQSLOTS_PACK,
    _REVOKE,
    _SLOTS,
    _SLOTS_PACK,
    _TOKEN,
    _VOID,
    Address,
    ExonStats,
)

__all__ = ["ExonProtocol", "ExonStats"]

_INDEX: Final = struct.Struct(">I").unpack_from

#: The datagram codec that runs: ``a3m._native``'s where ``a3m.NATIVE`` (the same frames and
#: errors from the same bytes: tests/native), else ``wire``'s, the specification.
_DECODE_HEADER: Final[Callable[[bytes], tuple[bytes, bytes, int]]] = (
    wire.decode_header if _native is None else _native.decode_header)
_DECODE_FRAMES: Final[Callable[[bytes, int, int], tuple[list[wire.Frame],
                                                        wire.WireError | None]]] = (
    wire.decode_frames if _native is None else _native.decode_frames)


class ExonProtocol(LivenessPart):
    """One Exon node, without I/O. See ``docs/design.md`` section 1 for the driving contract.

    The rules live in its parts (``sender``, ``receiver``, ``restarts``, ``closing``,
    ``liveness``); this class dispatches datagrams, timers and output to them.
    """

    def associate(self, node_id: str, addr: Address,
                  public_key: str | bytes | None = None) -> None:
        """Register the address of ``node_id`` by hand (traffic from it updates it later), and
        pin its long-term key when ``public_key`` is given: no other key may speak as it."""
        wire.encode_id(node_id)
        self._addr[node_id] = addr
        self._peer_mds.pop(node_id, None)
        if public_key is not None:
            if self._sec is None:
                raise UsageError("a public key pins nothing at a node that opted out of security")
            self._sec.trust.pin(node_id, parse_public_key(public_key))

    def announce(self, now: float) -> None:
        """Tell every peer we hold a record with where we are now (after a rebind).

        Peers learn a new address from any datagram; this sends each one a harmless frame at
        once instead of waiting for a retransmission or a probe: a probe from each receive
        record and a REQSLOTS(n=0) carrying ``l`` from each send record.
        """
        for rr in self._rr.values():
            self._emit(rr.peer, _SLOTS_PACK(_SLOTS, rr.sck, rr.rck, 0, self._ack_delay_us, 0))
        for sr in self._sr.values():
            self._emit(sr.peer, _REQSLOTS_PACK(_REQSLOTS, sr.sck, 0, sr.lowest_in_use(), 0))

    @property
    def clock(self) -> int:
        """The node clock ``ck`` (diagnostics)."""
        return self._clock.value

    @property
    def boot_clock(self) -> int:
        """The clock this incarnation started from: above every ``r`` an earlier one used."""
        return self._boot

    def next_event(self) -> Event | None:
        """The next event, or None."""
        return self._events.popleft() if self._events else None

    def drain_events(self) -> list[Event]:
        """Every pending event, oldest first (cheaper than looping on :meth:`next_event`)."""
        out = list(self._events)
        self._events.clear()
        return out

    def is_idle(self) -> bool:
        """No record, nothing queued or in flight, nothing waiting to be sent."""
        return not self._sr and not self._rr and not self._out and not self._acks

    def has_output(self) -> bool:
        """Whether :meth:`datagrams_to_send` has something to send now (ACKs that wait for a
        frame to ride with count from their deadline on, which :meth:`next_timer` gives)."""
        return (bool(self._out) or (self._ack_now and bool(self._acks))
                or (self._sec is not None and self._sec.has_output()))

    def ack_deadline(self) -> float | None:
        """When the ACKs waiting for a frame to ride with leave on their own (None: none wait)."""
        return None if not self._acks or self._ack_due == INF else self._ack_due

    def record_counts(self) -> tuple[int, int]:
        """(send records, receive records) currently held."""
        return len(self._sr), len(self._rr)

    def receive_datagrams(self, batch: list[tuple[bytes, Address]], now: float) -> None:
        """Process datagrams read together (a socket's queue, drained at once), as many calls
        of :meth:`receive_datagram` would, but sealed datagrams of live sessions first: when
        the queue is long with a flood, established peers' traffic is handled before any of
        the flood's (docs/exon-wire.md, "Under load"). Never raises on bad input."""
        feed = self.receive_datagram
        sec = self._sec
        if sec is None or len(batch) < 2:
            for data, addr in batch:
                feed(data, addr, now)
            return
        live = sec.sessions_by_index()
        rest: list[tuple[bytes, Address]] = []
        for item in batch:
            data = item[0]
            if (len(data) >= SEALED_OVERHEAD and data[1] == _DATA and data[0] == _VERSION
                    and _INDEX(data, 2)[0] in live):
                if rest:
                    self.stats.data_first += 1  # ahead of something that came earlier
                feed(data, item[1], now)
            else:
                rest.append(item)
        for data, addr in rest:
            feed(data, addr, now)

    def receive_datagram(self, data: bytes | memoryview, addr: Address, now: float) -> None:
        """Process one datagram from ``addr``. Never raises on bad input: it is counted."""
        st = self.stats
        st.datagrams_in += 1
        st.bytes_in += len(data)
        sec = self._sec
        peer = None
        buf: bytes  # (typed: the compiled build slices and compares it natively)
        if sec is not None:
            opened = sec.open(data, addr, now)
            if opened is None:
                return
            buf, peer = opened
        elif len(data) > 1 and data[1] != wire.PLAIN:
            st.secure_refused += 1
            return
        else:
            buf = data if isinstance(data, bytes) else bytes(data)
        hdr = self._rx_hdr
        if hdr and buf.startswith(hdr):
            # The header of the last datagram read (a stream's datagrams all carry the same):
            # its source is known, nothing to decode.
            src = self._rx_src
            offset = len(hdr)
        else:
            try:
                src_b, dst_b, offset = _DECODE_HEADER(buf)
            except wire.WireError as exc:
                self._count_error(exc)
                return
            if dst_b != self._id_bytes:
                st.wrong_dst += 1
                return
            cached = self._src_cache.get(src_b)
            if cached is None:
                try:
                    cached = src_b.decode("utf-8")
                except UnicodeDecodeError:
                    st.malformed += 1
                    return
                if len(self._src_cache) > 4096:
                    self._src_cache.clear()
                self._src_cache[src_b] = cached
            src = cached
            if src == self.id:
                st.from_self += 1
                return
            self._rx_hdr = buf[:offset]
            self._rx_src = src
        if peer is not None and src != peer:
            st.spoofed += 1  # sealed by one peer, naming another as its source
            return
        frames, error = _DECODE_FRAMES(buf, offset, self.config.max_message_size)
        if error is not None:
            self._count_error(error)
        if not frames:
            return
        if sec is None and self._addr.get(src) != addr:
            # In clear, any datagram moves its source (the secure layer moves a peer only
            # to an address that authenticated and answered a challenge).
            if src in self._addr:
                st.address_changes += 1
            self._addr[src] = addr
            self._peer_mds.pop(src, None)
        sr = self._sr.get(src)
        if sr is not None:
            sr.heard_at = now  # peer liveness: any valid datagram counts
        if self._unreachable and src in self._unreachable:
            self._heard_again(src)
        st.frames_in += len(frames)
        rr = self._rr.get(src)
        acks: dict[int, list[int]] | None = None
        lst: list[int] | None = None  # the slots to ACK of record ``lst_r``
        lst_r = -1
        push_event = self._events.append
        n_deliv = n_bytes = 0
        # Typed, so that the compiled build compares them as machine integers (Any would box
        # each record field it meets: a 64-bit slot or r is an allocation each time).
        s: int
        r: int
        payload: bytes
        index: int
        count: int
        total: int
        flags: int
        for f in frames:
            kind = f[0]
            if kind == _TOKEN:
                _, s, r, payload, index, count, total, flags = f
                if rr is None:
                    rr = self._rr.get(src)
                if rr is not None and rr.rck == r and rr.low <= s < rr.sck and s not in rr.dead:
                    if s == rr.low and not rr.dead:
                        rr.low = s + 1  # in-order arrival: the common case, inlined
                        if s >= rr.high:
                            rr.high = s + 1
                    else:
                        rr.consume(s)
                        if s != rr.high:
                            # It opens a gap (above the highest received) or fills one
                            # (below it): the sender is recovering, ACK at once (QUIC's
                            # rule; a token in order above an older gap waits as usual).
                            self._ack_now = True
                        if s >= rr.high:
                            rr.high = s + 1
                    if flags & _FLAG_RETRANSMIT:
                        self._ack_now = True  # its first copy was taken for lost
                        rr.copies.add(s)  # (the ACK answers a copy sent again: it says so)
                    rr.last_active = now
                    if count == 1:
                        push_event(Delivered(src, payload))
                        n_deliv += 1
                        n_bytes += len(payload)
                        self._buffered += len(payload)  # grants below look at it
                    else:
                        self._reassemble(rr, s, payload, index, count, total)
                    if rr.deferred is not None:
                        d_s, d_n = rr.deferred
                        rr.deferred = None
                        self._grant(rr, d_s, d_n)
                else:
                    if r < self._boot or (self._abandoned and self._abandoned.get(src) == r):
                        # A record of an earlier incarnation of this node, or one whose
                        # revocation was abandoned at close: it may or may not have delivered
                        # this token. Never ACK (that would turn an undelivered token into a
                        # silent loss): tell the sender it is gone.
                        self._void(src, r)
                        if self._linger is not None:
                            st.linger_answers += 1
                        continue
                    if r >= self._clock.value:
                        # Never one of our records (each r is taken from the clock): forged,
                        # or a later incarnation's while this one lingers. No answer.
                        st.stale_frames += 1
                        continue
                    # A record of this incarnation: the slot was consumed (delivered) or
                    # released, as a record is discarded only without live slots.
                    st.duplicates += 1
                    self._ack_now = True  # a retransmission: its ACK was lost or is late
                    if rr is not None and rr.rck == r and flags & _FLAG_RETRANSMIT:
                        rr.copies.add(s)  # (the ACK answers this copy: it says so)
                    if self._linger is not None:
                        st.linger_answers += 1
                if acks is None:
                    acks = self._acks.get(src)
                    if acks is None:
                        acks = self._acks[src] = {}
                    self._ack_dgrams += 1
                    if self._ack_dgrams >= 2 or not self._ack_delay:
                        self._ack_now = True
                    elif self._ack_due == INF:
                        self._ack_due = now + self._ack_delay
                if lst is None or r != lst_r:
                    lst = acks.get(r)
                    if lst is None:
                        lst = acks[r] = []
                    lst_r = r
                lst.append(s)
            elif kind == _ACK:
                self._on_ack(src, f[1], f[2], f[3], now)
            elif kind == _REQSLOTS:
                self._on_reqslots(src, f[1], f[2], f[3], f[4], now)
                rr = self._rr.get(src)
            elif kind == _SLOTS:
                self._on_slots(src, f[1], f[2], f[3], f[4], f[5], now)
            elif kind == _VOID:
                self._on_void(src, f[1], now)
            elif kind == _REVOKE:
                self._on_revoke(src, f[1], now)
            else:
                self._on_revoked(src, f[1], f[2], now)
                rr = self._rr.get(src)
        if self._ack_detect:
            self._detect_acked(now)
        if n_deliv:
            st.delivered += n_deliv
            st.delivered_bytes += n_bytes

    def datagrams_to_send(self, now: float) -> list[tuple[bytes, Address]]:
        """Everything due now, packed into as few datagrams as fit ``max_datagram_size``."""
        if self._acks:
            if self._ack_now or now >= self._ack_due:
                self._flush_acks()
            elif self._out:
                self._flush_acks(self._out)  # they ride with frames that leave anyway
        sec = self._sec
        if not self._out:
            return [] if sec is None or not sec.has_output() else self._count_out(
                sec.take_control())
        if self._voids_out:
            self._voids_out.clear()
        result: list[tuple[bytes, Address]] = []
        st = self.stats
        for peer, frames in self._out.items():
            addr = self.address_of(peer)
            if addr is None:
                st.no_address += len(frames)
                continue
            limit = self._limit(peer)
            if sec is not None:
                limit -= SEALED_OVERHEAD
            hdr = self._header(peer)
            st.frames_out += len(frames)
            plains: list[bytes] = []
            buf = [hdr]
            size = len(hdr)
            for f in frames:
                lf = len(f)
                if size + lf > limit and len(buf) > 1:
                    plains.append(b"".join(buf))
                    buf = [hdr]
                    size = len(hdr)
                buf.append(f)
                size += lf
            plains.append(b"".join(buf))
            if sec is None:
                for d in plains:
                    result.append((d, addr))
            else:
                sec.seal_many(peer, plains, addr, now, result)
        self._out.clear()
        if self._solo:
            for peer, frame in self._solo:
                addr = self.address_of(peer)
                if addr is not None:
                    d = self._header(peer) + frame
                    if sec is None:
                        result.append((d, addr))
                    else:
                        sec.seal(peer, d, addr, now, result)
            self._solo.clear()
        if sec is not None and sec.has_output():
            result = sec.take_control() + result  # handshakes go first
        return self._count_out(result)

    def _count_out(self, result: list[tuple[bytes, Address]]) -> list[tuple[bytes, Address]]:
        st = self.stats
        st.datagrams_out += len(result)
        for d, _ in result:
            st.bytes_out += len(d)
        return result

    def next_timer(self) -> float | None:
        """The earliest deadline at which :meth:`handle_timer` has work, or None."""
        t_exon = self._exon_timer()
        if self._sec is not None:
            t_sec = self._sec.next_timer()
            if t_sec is not None and (t_exon is None or t_sec < t_exon):
                return t_sec
        return t_exon

    def _exon_timer(self) -> float | None:
        """The earliest deadline of Exon's own timers (the secure layer's aside)."""
        timers = self._timers
        t_exon = self._ack_due
        while timers:
            t, _, rec = timers[0]
            if rec.alive and rec.timer_at == t:
                t_exon = t if t < t_exon else t_exon
                break
            heapq.heappop(timers)
        return None if t_exon == INF else t_exon

    def handle_timer(self, now: float) -> None:
        """Run every timer due at ``now`` (retransmission, idle release, probes, ACKs)."""
        if now >= self._ack_due:
            self._ack_now = True
        if self._sec is not None:
            self._sec.handle_timer(now)
        timers = self._timers
        while timers and timers[0][0] <= now:
            t, _, rec = heapq.heappop(timers)
            if not rec.alive or rec.timer_at != t:
                continue
            rec.timer_at = INF
            if isinstance(rec, SendRecord):
                self._send_timer(rec, now)
            elif isinstance(rec, RecvRecord):
                self._recv_timer(rec, now)
            else:
                self._linger_timer(rec, now)
        if len(timers) > 64 and len(timers) > 4 * (len(self._sr) + len(self._rr)):
            self._timers = [e for e in timers if e[2].alive and e[2].timer_at == e[0]]
            heapq.heapify(self._timers)
