"""A message's way in: ``NodeCore`` -> :meth:`RecvPath.on_sequenced_fast` -> credits and order
(:meth:`RecvPath._on_sequenced`) -> the pattern's ``on_data`` (by default: the link's
queue) -> :meth:`RecvPath.try_recv` / :meth:`RecvPath.take_runs` -> the application.
"""

from __future__ import annotations

from collections import deque
from itertools import chain
from random import Random
from typing import Any

from mypy_extensions import mypyc_attr

from a3m.core import message as m
from a3m.core.cookies import FLAGGED, SEQ_MASK
from a3m.core.link import Link, PeerId, State
from a3m.core.node_base import NodeBase
from a3m.core.socket_send import SendPath
from a3m.core.socket_state import CTRL_ALLOWANCE, Received
from a3m.errors import ProtocolViolation, UsageError


@mypyc_attr(allow_interpreted_subclasses=True)  # the patterns subclass SocketCore
class RecvPath(SendPath):
    """From a sequenced message's arrival to the application's recv: credits and order
    checked, the pattern's hooks called, queued messages taken fairly over links."""

    def __init__(self, node: NodeBase, tag: str, rng: Random | None = None) -> None:
        super().__init__(node, tag, rng)
        self.orphans: deque[Received] = deque()  # delivered on links that have since closed

    def on_sequenced_fast(self, node_id: str, src_tag: str, mtype: int, src_inc: int,
                          dst_inc: int, seq: int, payload: bytes) -> bool:
        """The common case without building a Message: a sequenced message on a link that is
        established or unlinking. False sends it down the general path."""
        link = self.links.get((node_id, src_tag))
        if link is None or link.my_inc != dst_inc or link.state is State.LINKING:
            return False
        link.last_active = self.node.now
        self._on_sequenced(link, mtype, seq, payload)
        return True

    def _on_sequenced(self, link: Link, mtype: int, seq: int, payload: Any) -> None:
        if link.state is State.CLOSED:
            return
        flag = 0
        if seq > SEQ_MASK:  # sent with a cookie: say when the application takes it
            seq &= SEQ_MASK
            if seq == 0:
                self.protocol_violation(link, "sequence numbers start at 1")
                return
            if mtype == m.DATA or mtype == m.BATCH:
                flag = FLAGGED
        span = 1
        if mtype == m.DATA:
            if not link.recv.on_arrival(len(payload)):
                self.protocol_violation(link, "sent beyond its credits")
                return
        elif mtype == m.BATCH:
            if not isinstance(payload, list):
                body: bytes = payload
                try:
                    payload = m.SPLIT_BATCH(body)
                except ProtocolViolation as exc:
                    self.protocol_violation(link, str(exc))
                    return
                size = m.batch_payload_bytes(len(body), len(payload))
            else:
                size = sum(map(len, payload))
            span = len(payload)
            room = link.recv.max_edge - link.recv.received
            if span > room:  # what its credits covered is kept, as for DATA one by one
                if room > 0:
                    self._on_sequenced(link, mtype, seq, payload[:room])
                if not link.closed:  # (the part it could send may have ended the link)
                    self.protocol_violation(link, "sent beyond its credits")
                return
            link.recv.on_arrival(size, span)
        else:
            link.ctrl_pending += 1
            if link.ctrl_pending > CTRL_ALLOWANCE:
                self.protocol_violation(link, "too many control messages")
                return
        if not link.ordered:
            link.expected_seq = max(link.expected_seq, seq + span)
            self._process(link, mtype | flag, payload, seq)
            return
        if seq == link.expected_seq:
            # The sequence moves on before a hook runs: a hook that raises loses only its own
            # message, never wedges the link (the driver reports the error).
            reorder = link.reorder
            if span > 1 and reorder and self._overlaps(link, seq, span):
                return
            link.expected_seq = seq + span
            failed: Exception | None = None
            try:
                self._process(link, mtype | flag, payload, seq)
            except Exception as exc:
                failed = exc
            while reorder and link.expected_seq in reorder:
                s = link.expected_seq
                t, p = reorder.pop(s)
                span = len(p) if t & 0xFF == m.BATCH else 1
                if span > 1 and reorder and self._overlaps(link, s, span):
                    break  # (the link is closed; a hook's error above is still raised)
                link.expected_seq = s + span
                try:
                    self._process(link, t, p, s)
                except Exception as exc:
                    failed = failed or exc
            if failed is not None:
                raise failed
        elif seq > link.expected_seq and seq not in link.reorder:
            link.reorder[seq] = (mtype | flag, payload)
        else:
            self.protocol_violation(link, f"sequence number {seq} repeated")
            return
        if link.state is State.UNLINKING:
            self._try_finish(link)

    def _overlaps(self, link: Link, seq: int, span: int) -> bool:
        """A BATCH about to be processed whose numbers another early message also claims:
        the peer broke the protocol (the link is closed)."""
        reorder = link.reorder
        for s in range(seq + 1, seq + span):
            if s in reorder:
                self.protocol_violation(link, f"sequence number {s} repeated")
                return True
        return False

    def _process(self, link: Link, mtype: int, payload: Any, seq: int) -> None:
        if mtype > 0xFF:  # flagged: note each message's processing index, then as usual
            mtype &= 0xFF
            q = link.confirm_q
            base = link.data_in
            if mtype == m.DATA:
                q.append((base + 1, seq))
            else:
                q.extend((base + 1 + i, seq + i) for i in range(len(payload)))
        if mtype == m.DATA:
            link.data_in += 1
            link.processed += 1
            self.stats["received"] += 1
            obs = self.node.observer
            if obs is not None:
                obs.on_delivered(self.tag, link.peer, link.peer_inc, seq, len(payload))
            self.on_data(link, payload)
        elif mtype == m.BATCH:
            count = len(payload)
            link.data_in += count
            link.processed += count
            self.stats["received"] += count
            obs = self.node.observer
            if obs is not None:
                for i, one in enumerate(payload):
                    obs.on_delivered(self.tag, link.peer, link.peer_inc, seq + i, len(one))
            self.on_data_many(link, payload)
        else:
            link.processed += 1
            link.ctrl_pending -= 1
            self.on_control(link, mtype, payload)

    def try_recv(self) -> Received | None:
        if not self.receives:
            raise UsageError(f"a {self.kind} socket cannot receive")
        orphans = self.orphans
        while orphans:
            got = self.orphan(orphans.popleft())
            if got is not None:
                self.stats["delivered"] += 1
                return got
        return self.choose_recv()

    def try_recv_payload(self) -> bytes | None:
        """The next payload, as :meth:`try_recv` would give it (None: nothing yet), without
        building a :class:`Received` where the default receive hooks are in force."""
        if self.orphans or not self._batch_recv or not self.receives:
            got = self.try_recv()
            return None if got is None else got.payload
        taken = self.next_from_links()
        return None if taken is None else taken[1]

    def try_recv_many(self, max_items: int) -> list[bytes]:
        """Up to ``max_items`` payloads, in the order :meth:`try_recv` would give them."""
        runs = self.try_recv_runs(max_items)
        return runs[0][2] if len(runs) == 1 else list(chain.from_iterable(r[2] for r in runs))

    def try_recv_runs(self, max_items: int, ahead: bool = False
                      ) -> list[tuple[PeerId, bytes | None, list[bytes]]]:
        """Up to ``max_items`` messages as :meth:`try_recv_many` takes them, in runs of one
        link's messages: ``(source, topic, payloads)`` (a pattern with its own
        ``choose_recv``, or an orphan: one message per run). ``ahead``: the caller gives
        the application the first now and reads the rest ahead (see :meth:`take_runs`)."""
        if not self.receives:
            raise UsageError(f"a {self.kind} socket cannot receive")
        out: list[tuple[PeerId, bytes | None, list[bytes]]] = []
        count = 0
        orphans = self.orphans
        while orphans and count < max_items:
            got = self.orphan(orphans.popleft())
            if got is not None:
                self.stats["delivered"] += 1
                out.append((got.source, got.topic, [got.payload]))
                count += 1
        if count < max_items:
            if self._batch_recv:
                out += [(peer, None, p)
                        for peer, p in self.take_runs(max_items - count, ahead and not out)]
            else:
                choose = self.choose_recv
                while count < max_items and (got := choose()) is not None:
                    out.append((got.source, got.topic, [got.payload]))
                    count += 1
        return out

    @property
    def readable(self) -> bool:
        if not self.receives:
            return False
        if self.orphans:
            return True
        ready = self._ready
        while ready:
            if ready[0].inq:
                return True
            ready.popleft().ready = False  # emptied since (the link ended)
        return False

    def next_from_links(self) -> tuple[Link, bytes] | None:
        """Take the next queued DATA payload, fair round robin over links, and return its
        credit (:meth:`delivered_from`): the building block of :meth:`choose_recv`. Only
        links with messages waiting are looked at (``_ready``), however many are idle."""
        ready = self._ready
        while ready:
            link = ready.popleft()
            q = link.inq
            if not q:  # emptied since (the link ended)
                link.ready = False
                continue
            payload = q.popleft()
            if q:
                ready.append(link)  # its next message after the other links' next
            else:
                link.ready = False
            self.delivered_from(link)
            return link, payload
        return None

    def take_from_links(self, max_items: int) -> list[bytes]:
        """Up to ``max_items`` queued DATA payloads, in order per link, fair over links (each
        in turn gives what it has), with their credits returned once per link: the bulk
        form of :meth:`next_from_links`."""
        runs = self.take_runs(max_items)
        return runs[0][1] if len(runs) == 1 else list(chain.from_iterable(r[1] for r in runs))

    def take_runs(self, max_items: int, ahead: bool = False
                  ) -> list[tuple[PeerId, list[bytes]]]:
        """As :meth:`take_from_links`, by link: ``(peer, payloads)`` runs. ``ahead``: only
        the first message goes to the application now (the rest is read ahead), so a
        message sent with a cookie is taken only as that first one. Each link with messages
        waiting gives what it has in turn, in the order they came (``_ready``); idle links
        cost nothing."""
        ready = self._ready
        runs: list[tuple[PeerId, list[bytes]]] = []
        left = max_items
        for _ in range(len(ready)):
            if not left:
                break
            link = ready.popleft()
            q = link.inq
            if not q:  # emptied since (the link ended)
                link.ready = False
                continue
            if len(q) <= left:
                got = list(q)
                q.clear()
                link.ready = False
            else:
                popleft = q.popleft
                got = [popleft() for _ in range(left)]
                ready.append(link)  # the rest after the other links' turn
            runs.append((link.peer, got))
            if ahead and link.confirm_q:
                self._hold_ahead(link, len(got), max_items - left)
            left -= len(got)
            self.delivered_from(link, len(got))
        return runs
