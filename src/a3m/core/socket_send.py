"""A message's way out: :meth:`SendPath.try_send` -> the pattern's send -> :meth:`SendPath.send_on`
(numbered, one credit) -> held on the link for the node's next output ->
:meth:`SendPath.flush_link` -> BATCHes (:meth:`SendPath._emit_runs`) -> ``NodeBase.emit``.
"""

from __future__ import annotations

from random import Random
from typing import Any

from mypy_extensions import mypyc_attr

from a3m.core import message as m
from a3m.core.cookies import CONFIRM
from a3m.core.link import Link
from a3m.core.node_base import NodeBase
from a3m.core.socket_cookies import CookiePart
from a3m.errors import MessageTooLarge, UsageError


@mypyc_attr(allow_interpreted_subclasses=True)  # the patterns subclass SocketCore
class SendPath(CookiePart):
    """From the application's send to the node's output: sizes checked, sequence numbers
    and credits taken, DATA held for the turn and sent as BATCHes."""

    def __init__(self, node: NodeBase, tag: str, rng: Random | None = None) -> None:
        super().__init__(node, tag, rng)
        self._rr_send = 0  # the default choose_send_link's round robin

    def try_send(self, payload: bytes, cookie: object | None = None, **kw: Any) -> bool:
        """Send now if a link takes it (False: it must wait). ``cookie``: the outcome of the
        message, per peer it went to, comes back with it (:meth:`take_cookies`)."""
        self._check_sender(kw)
        self._check_size(len(payload))
        if cookie is not None:
            if self.jar.full:
                return False  # the application reads its outcomes first
            self._cookie = cookie
            try:
                return self.pattern_send(payload, **kw)
            finally:
                self._cookie = None
        if self._batch_send and not kw:
            # The default hooks with one link (PUSH, PAIR...): what choose_send_link decides.
            ring = self._ring if self._ring is not None else self.link_ring()
            if len(ring) == 1:
                link = ring[0]
                if not link.can_send:
                    return False
                self.send_on(link, payload)
                return True
        return self.pattern_send(payload, **kw)

    def try_send_many(self, payloads: list[bytes], cookies: list[Any] | None = None,
                      **kw: Any) -> int:
        """Send the first messages of ``payloads`` that can go now; returns how many.
        ``cookies``: one per message (None: that message has none)."""
        self._check_sender(kw)
        if not payloads:
            return 0
        self._check_size(max(map(len, payloads)))
        return self._send_many(payloads, cookies, kw)

    def try_send_sized(self, payloads: list[bytes], cookies: list[Any] | None = None) -> int:
        """:meth:`try_send_many` for messages each already known to be within the largest
        message this node sends (a runtime's send buffer checks them as they are offered):
        no second pass over their sizes."""
        self._check_sender({})
        if not payloads:
            return 0
        return self._send_many(payloads, cookies, {})

    def _check_size(self, size: int) -> None:
        """MessageTooLarge for a payload of ``size`` bytes this node cannot send."""
        largest = self.node.max_message_size - m.DATA_OVERHEAD_MAX
        if size > largest:
            raise MessageTooLarge(
                f"{size} bytes > the largest message this node sends ({largest} bytes)")

    def _check_sender(self, kw: dict[str, Any]) -> None:
        """UsageError unless this socket sends and is open; TypeError for a keyword its
        pattern's send does not take."""
        if not self.sends:
            raise UsageError(f"a {self.kind} socket cannot send")
        if self.closed:
            raise UsageError("socket is closed")
        if kw:
            self.check_send_keywords(kw)

    def _send_many(self, payloads: list[bytes], cookies: list[Any] | None,
                   kw: dict[str, Any]) -> int:
        if cookies is not None:
            if len(cookies) != len(payloads):
                raise UsageError("send_many: one cookie per message (None for none)")
            if self._batch_send and not kw:
                return self._send_many_marked(payloads, cookies)
            sent = 0
            while sent < len(payloads) and self.try_send(payloads[sent], cookies[sent], **kw):
                sent += 1
            return sent
        return self.pattern_send_many(payloads, **kw)

    def _send_many_marked(self, payloads: list[bytes], cookies: list[Any]) -> int:
        """:meth:`pattern_send_many`'s runs, with cookies (the default send hooks): each
        link takes what its credits and the unread outcomes' bound allow, as BATCHes."""
        jar = self.jar
        n = min(len(payloads), jar.limit - jar.held)
        sent = 0
        while sent < n:
            link = self.choose_send_link(payloads[sent])
            if link is None:
                break
            k = self._run_share(link, n - sent, n)
            if not link.batches or link.peer[0] == self.node.node_id:
                for i in range(sent, sent + k):  # (each leaves flagged at once)
                    self._cookie = cookies[i]
                    try:
                        self.send_on(link, payloads[i])
                    finally:
                        self._cookie = None
            else:
                seq = link.next_seq
                self.send_many_on(link, payloads[sent:sent + k])
                if jar.add_run(link.peer, link.my_inc, seq, cookies[sent:sent + k]):
                    link.pending_confirm = True
            sent += k
        return sent

    def _run_share(self, link: Link, left: int, total: int) -> int:
        """How many of the ``left`` messages of a batch of ``total`` ``link`` takes in one run
        (the default hooks' round robin): what its credits allow, and at most its share of
        the batch over the socket's links, so that a batch of any size spreads over the links
        as sends one at a time would. (Whole runs went to one link each: a producer whose
        single sends and buffered runs alternated sent nearly everything to one of two.)"""
        k = link.send.edge - link.send.sent
        ring = self._ring if self._ring is not None else self.link_ring()
        links = len(ring)
        if links > 1:
            share = -(-total // links)
            if share < k:
                k = share
        return k if k < left else left

    def check_send_keywords(self, kw: dict[str, Any]) -> None:
        """TypeError for a keyword this pattern's send does not take (``send_keywords``)."""
        for name in kw:
            if name not in self.send_keywords:
                raise TypeError(f"{self.kind} send() got an unexpected keyword argument "
                                f"{name!r}")

    def send_room(self) -> int:
        """How many messages sends would take now without waiting: the credits of the
        established links where the default send hooks share messages out; 0 where a
        pattern has its own (they decide per message), and once closed."""
        if not self._batch_send or self.closed or not self.sends:
            return 0
        ring = self._ring if self._ring is not None else self.link_ring()
        return sum(lk.send.edge - lk.send.sent for lk in ring if lk.can_send)

    @property
    def writable(self) -> bool:
        return self.sends and not self.closed and self.pattern_can_send()

    def send_on(self, link: Link, payload: bytes, mtype: int = m.DATA) -> None:
        """Send a sequenced message on an established link (DATA spends one credit)."""
        node = self.node
        if len(payload) > node.max_message_size - m.DATA_OVERHEAD_MAX:
            self.check_size(link, payload)  # near the limit: the exact size decides
        seq = link.next_seq
        link.next_seq = seq + 1
        now = link.last_active = node.now
        ka = self.options.keepalive_s
        if link.ka_at > now + ka and ka > 0:
            self._arm_keepalive(link, now + ka)  # a send may start a wait on the peer
        if mtype == m.DATA:
            link.send.sent += 1
            self.stats["sent"] += 1
            obs = node.observer
            if obs is not None:
                obs.on_sent(self.tag, link.peer, link.my_inc, seq, len(payload))
            cookie = self._cookie
            if cookie is not None:
                self.jar.add(link.peer, link.my_inc, seq, cookie)
            # An exchange's DATA (a request, a reply: one at a time per link) never makes a
            # BATCH: it goes to the output at once, not through the node's cork.
            if link.batches and link.peer[0] != node.node_id and (
                    not self.exchange or link.pending):
                pending = link.pending  # (as _hold does, inline: once per message)
                if not pending:
                    link.pending_seq = seq
                    node.cork(self, link)
                pending.append(payload)
                if cookie is not None:
                    link.pending_confirm = True
                return
            if cookie is not None:
                seq |= CONFIRM
        elif link.pending:
            self.flush_link(link)  # a control message follows the DATA before it
        node.emit(link.peer[0], m.encode_with_head(self._head(link), seq, payload, mtype))

    def send_many_on(self, link: Link, payloads: list[bytes]) -> None:
        """Send DATA messages in order on an established link that holds a credit for each:
        as BATCHes where the peer takes them (one sequence number and one credit per
        message, as :meth:`send_on` one by one would spend)."""
        n = len(payloads)
        if n == 1 or not link.batches:
            for payload in payloads:
                self.send_on(link, payload)
            return
        node = self.node
        seq = link.next_seq
        link.next_seq = seq + n
        now = link.last_active = node.now
        ka = self.options.keepalive_s
        if link.ka_at > now + ka and ka > 0:
            self._arm_keepalive(link, now + ka)  # a send may start a wait on the peer
        link.send.sent += n
        self.stats["sent"] += n
        obs = node.observer
        if obs is not None:
            for i, payload in enumerate(payloads):
                obs.on_sent(self.tag, link.peer, link.my_inc, seq + i, len(payload))
        if link.peer[0] != node.node_id:
            self._hold(link, seq, payloads)
        else:
            self._emit_runs(link, seq, payloads)

    def _hold(self, link: Link, seq: int, payloads: list[bytes]) -> None:
        """DATA numbered from ``seq`` waits on ``link`` for the node's next output."""
        pending = link.pending
        if not pending:
            link.pending_seq = seq
            self.node.cork(self, link)
        pending += payloads

    def flush_link(self, link: Link) -> None:
        """Hand the DATA waiting on ``link`` to the node's output (the node does it for every
        link when the transport takes its output: :meth:`NodeCore.take_output`)."""
        pending = link.pending
        if pending:
            link.pending = []
            confirm = link.pending_confirm
            link.pending_confirm = False
            self._emit_runs(link, link.pending_seq | CONFIRM if confirm else link.pending_seq,
                            pending)
        self.flush_taken(link)

    def _emit_runs(self, link: Link, seq: int, payloads: list[bytes]) -> None:
        """Emit DATA numbered from ``seq``: BATCHes of up to ``node.batch_bytes`` (payload
        bytes plus 4 per message), and no larger than the transport carries unfragmented to
        that node; a message larger than that alone, a lone message as DATA. (``seq`` may
        carry :data:`CONFIRM`: every run then does.)"""
        node = self.node
        head = self._head(link)
        dst = link.peer[0]
        n = len(payloads)
        if n == 1:
            node.emit(dst, m.encode_with_head(head, seq, payloads[0]))
            return
        limit = node.batch_bytes
        whole = node.unfragmented(dst)
        if whole is not None:  # (less the fixed header, sequence and count: 20 bytes)
            limit = max(0, min(limit, whole - 20 - len(head)))
        for one in m.BATCH_RUNS(head, seq, payloads, limit):
            node.emit(dst, one)

    def check_size(self, link: Link, payload: bytes) -> None:
        """Raise MessageTooLarge if ``payload`` sent on ``link`` would not fit the transport
        (:meth:`send_on` checks it before anything changes; fan-outs check every link first)."""
        size = m.data_size(self.tag_bytes, link.peer_tag_bytes, payload)
        if size > self.node.max_message_size:
            raise MessageTooLarge(f"a {size}-byte message > max_message_size "
                                  f"{self.node.max_message_size}")
