"""The socket engine: links, handshake rules, credits, ordering, and the pattern extension points.

A socket pattern (PUSH, PULL, PAIR, ... or a user's own kind) subclasses :class:`SocketCore`
and overrides the hooks in the "extension points" section, as NNG's protocol ops do; the core
never knows what "push" means. Everything here is sans-I/O: messages leave through the node
core's ``emit`` and time comes in as ``now``.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from functools import partial
from heapq import heappop, heappush
from itertools import accumulate, chain
from random import Random
from typing import TYPE_CHECKING, Any, ClassVar, cast

from mypy_extensions import mypyc_attr

from a3m.core import message as m
from a3m.core.cookies import (
    CONFIRM,
    FLAGGED,
    SEQ_MASK,
    Cookie,
    CookieJar,
    TakenReport,
    encode_taken,
    taken_chunks,
)
from a3m.core.link import (
    ALREADY_LINKED,
    CANCELLED,
    CLOSED_SOCKET,
    INCOMING_NOT_ALLOWED,
    INCOMPATIBLE,
    LINK_LIMIT,
    NOT_FOUND,
    OK,
    REASONS,
    Ev,
    Link,
    PeerId,
    State,
    is_fatal,
    most_severe,
)
from a3m.core.message import Message, Metadata
from a3m.errors import MessageTooLarge, ProtocolViolation, UsageError

if TYPE_CHECKING:
    from a3m.core.node_core import NodeCore

#: Pattern control messages a peer may have waiting out of order on one link.
CTRL_ALLOWANCE = 256
INF = float("inf")


@dataclass(slots=True)
class Received:
    """A message handed to the application."""

    payload: bytes
    source: PeerId
    topic: bytes | None = None
    attrs: dict[str, Any] | None = None


@dataclass
class SocketOptions:
    """Options every socket has (patterns add their own through ``extra_options``)."""

    capacity: int = 256  # credits per link: messages a peer may have queued here
    #: The capacity grows by itself up to this (a peer waiting on credits while the
    #: application keeps up: a long path), paid from the node's credit budget (bytes, shared
    #: by its links; docs/credits.md). 0 or <= capacity: fixed.
    capacity_max: int = 16384
    ordered: bool = True  # per-link FIFO delivery
    incoming: bool = True  # accept links initiated by peers
    max_links: int = 0  # 0 = no limit
    retry_base_s: float = 0.05  # first retry after a non-fatal refusal (randomised, grows)
    retry_max_s: float = 5.0
    reconnect: bool = False  # link again when the peer ends a link this socket initiated
    #: An established link quiet this long (seconds) either way gets a PING, which a peer
    #: that lost the link (its node restarted) answers with an ERROR: the link then ends
    #: (and is linked again, if this side initiated it). The PING also gives the transport
    #: something to deliver, so a node that stopped answering is noticed. 0 = never.
    keepalive_s: float = 5.0
    #: Cookies awaiting an outcome or not yet read, at most (a send with a cookie waits).
    max_cookies: int = 32768


@mypyc_attr(allow_interpreted_subclasses=True)  # the patterns subclass it
class SocketCore:
    """A socket's engine. Subclass it to make a socket pattern (see the extension points)."""

    #: The pattern's name (sent in LINK metadata as "type").
    kind: ClassVar[str] = "BASE"
    #: Pattern names this socket may link with.
    peers: ClassVar[frozenset[str]] = frozenset()
    #: Whether the application may send / receive on this socket.
    sends: ClassVar[bool] = True
    receives: ClassVar[bool] = True
    #: Fixed link limit for the pattern (PAIR: 1); 0 = none.
    pattern_max_links: ClassVar[int] = 0
    #: The keywords this pattern's send takes beyond the data (PUB: ``topic``); any other
    #: raises TypeError, as a Python function would.
    send_keywords: ClassVar[frozenset[str]] = frozenset()

    def __init__(self, node: NodeCore, tag: str, rng: Random | None = None,
                 **options: Any) -> None:
        self.node = node
        self.tag = tag
        self.tag_bytes = m.encoded_tag(tag)
        self.rng = rng or Random(0)
        self.options = SocketOptions()
        #: Cookies (a3m.core.cookies): those awaiting an outcome, and the outcomes unread.
        self.jar = CookieJar(self.options.max_cookies)
        #: The cookie of the send under way (None: none): :meth:`send_on` records it.
        self._cookie: object | None = None
        #: Links that ended here while a pattern still held flagged messages of theirs.
        self._late: list[Link] = []
        #: Flagged messages :meth:`take_runs` read ahead: (position among the messages it
        #: took, link, sequence number); the runtime reports each (:meth:`taken_ahead`)
        #: once the application took it from its inbox.
        self.ahead_flags: list[tuple[int, Link, int]] = []
        #: Positions in :attr:`ahead_flags` count from this (the runtime's inbox count).
        self.ahead_base = 0
        self.links: dict[PeerId, Link] = {}
        #: The peers of ``links`` by node (a node lost ends its links without a look at all).
        self._by_node: dict[str, set[PeerId]] = {}
        #: Links with messages waiting in ``inq``, in the order they got them (each once:
        #: ``Link.ready``): receives take from here, fair, without a look at idle links.
        self._ready: deque[Link] = deque()
        self.orphans: deque[Received] = deque()  # delivered on links that have since closed
        self.refusals: dict[PeerId, int] = {}  # last refusal per peer (for wait_linked)
        self.retry_at: dict[PeerId, float] = {}
        self._retry_count: dict[PeerId, int] = {}
        self._relink: set[PeerId] = set()  # peer-ended links to start again once closed
        self.closed = False
        self.violations = 0
        self.stats: dict[str, int] = {"sent": 0, "received": 0, "delivered": 0}
        self._rr_send = 0
        self._ring: list[Link] | None = None
        #: Deadlines, one lazy heap entry each (stale ones are skipped): each established
        #: link's keepalive (``Link.ka_at``), each relink after a refusal (``retry_at``).
        self._ka_heap: list[tuple[float, int, Link]] = []
        self._retry_heap: list[tuple[float, int, PeerId]] = []
        self._timer_seq = 0
        #: Heap entries the timers took (diagnostics: work per turn, not per link).
        self.timer_looks = 0
        cls = type(self)
        #: Whether the default send and receive hooks are in force, so a batch of messages
        #: may go to one link as one BATCH, and be taken from the queues in one go.
        self._batch_send = (cls.pattern_send is SocketCore.pattern_send
                            and cls.choose_send_link is SocketCore.choose_send_link)
        self._batch_recv = cls.choose_recv is SocketCore.choose_recv
        self._default_on_data = cls.on_data is SocketCore.on_data
        #: The default receive hooks are in force: a message carries nothing for the
        #: application but its payload and source (no topic, no group), so the runtime may
        #: take several ahead of the calls that will return them.
        self.plain_recv = (self.receives and self._batch_recv
                           and cls.orphan is SocketCore.orphan)
        for name, value in options.items():
            self.set_option(name, value)

    # ================================================================ extension points

    def on_link_added(self, link: Link) -> None:
        """A link became established (it can carry DATA now)."""

    def on_link_removed(self, link: Link) -> None:
        """A link stopped being usable for sending (unlinking or closed)."""

    def on_link_lost(self, link: Link, unknown_outcome: bool) -> None:
        """The transport lost track of the link's peer and the link is about to end:
        ``unknown_outcome`` when one of its messages may or may not have been delivered (the
        peer's node crashed with it in flight), False when the peer stopped answering."""

    def link_metadata(self) -> Metadata:
        """Extra LINK metadata this pattern (or a user's condition) sends."""
        return {}

    def check_link(self, peer: PeerId, meta: Metadata) -> int:
        """A custom link condition: return OK or a refusal code (e.g. ``link.REFUSED``)."""
        return OK

    def choose_send_link(self, payload: bytes, **kw: Any) -> Link | None:
        """The link the next message goes to; default: round robin over links with credits."""
        ring = self._ring if self._ring is not None else self.link_ring()
        n = len(ring)
        if n == 1:
            return ring[0] if ring[0].can_send else None
        start = self._rr_send
        for i in range(n):
            link = ring[(start + i) % n]
            if link.can_send:
                self._rr_send = (start + i + 1) % n
                return link
        return None

    def on_data(self, link: Link, payload: bytes) -> None:
        """A DATA message arrived in order; default: queue it for the application."""
        link.inq.append(payload)
        if not link.ready:
            link.ready = True
            self._ready.append(link)

    def on_data_many(self, link: Link, payloads: list[bytes]) -> None:
        """Several DATA messages arrived in order (a BATCH); default: :meth:`on_data` for
        each (queued for the application at once when ``on_data`` is the default). A hook
        that raises loses only its own message: the rest are still handed on."""
        if self._default_on_data:
            link.inq.extend(payloads)
            if not link.ready:
                link.ready = True
                self._ready.append(link)
            return
        failed: Exception | None = None
        for payload in payloads:
            try:
                self.on_data(link, payload)
            except Exception as exc:
                failed = failed or exc
        if failed is not None:
            raise failed

    def on_control(self, link: Link, mtype: int, payload: bytes) -> None:
        """A pattern control message (type >= 0x40) arrived in order."""
        self.protocol_violation(link, f"unexpected control message {mtype:#x}")

    def choose_recv(self) -> Received | None:
        """The next message for the application; default: fair round robin over links."""
        got = self.next_from_links()
        return None if got is None else Received(got[1], got[0].peer)

    def orphan(self, received: Received) -> Received | None:
        """A message that arrived on a link that has closed since, as the application will
        get it: a pattern that frames its payloads unwraps it here as in :meth:`choose_recv`
        (None: not for the application after all)."""
        return received

    def pattern_can_send(self) -> bool:
        """Whether a send would find a link now (used for POLLOUT)."""
        return any(lk.can_send for lk in self.links.values())

    def pattern_send(self, payload: bytes, **kw: Any) -> bool:
        """Send one application message; False when it must wait (no credits, no link)."""
        link = self.choose_send_link(payload, **kw)
        if link is None:
            return False
        self.send_on(link, payload)
        return True

    def pattern_send_many(self, payloads: list[bytes], **kw: Any) -> int:
        """Send the first messages of ``payloads`` that can go now, in order; returns how
        many. Default: with the default :meth:`pattern_send` and :meth:`choose_send_link`,
        round robin by runs (each link takes what its credits allow, as BATCHes); otherwise
        :meth:`pattern_send` one by one."""
        n = len(payloads)
        sent = 0
        if not self._batch_send:
            send = self.pattern_send
            while sent < n and send(payloads[sent], **kw):
                sent += 1
            return sent
        while sent < n:
            link = self.choose_send_link(payloads[sent], **kw)
            if link is None:
                break
            k = min(link.send.edge - link.send.sent, n - sent)
            self.send_many_on(link, payloads[sent:sent + k] if k < n else payloads)
            sent += k
        return sent

    def blocked_reason(self) -> str | None:
        """Why the last send could not go (the runtime puts it in its WouldBlock / Timeout
        message); None: the usual (no link, or no credit)."""
        return None

    def extra_options(self) -> dict[str, Any]:
        """Pattern options (name -> current value); set through :meth:`set_pattern_option`."""
        return {}

    def set_pattern_option(self, name: str, value: Any) -> None:
        raise UsageError(f"unknown option {name!r} for a {self.kind} socket")

    # ================================================================ helpers for patterns

    def send_on(self, link: Link, payload: bytes, mtype: int = m.DATA) -> None:
        """Send a sequenced message on an established link (DATA spends one credit)."""
        node = self.node
        if len(payload) > node.max_message_size - m.DATA_OVERHEAD_MAX:
            self.check_size(link, payload)  # near the limit: the exact size decides
        seq = link.next_seq
        link.next_seq = seq + 1
        link.last_active = node.now
        if mtype == m.DATA:
            link.send.sent += 1
            self.stats["sent"] += 1
            obs = node.observer
            if obs is not None:
                obs.on_sent(self.tag, link.peer, link.my_inc, seq, len(payload))
            cookie = self._cookie
            if cookie is not None:
                self.jar.add(link.peer, link.my_inc, seq, cookie)
            if link.batches and link.peer[0] != node.node_id:
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
        link.last_active = node.now
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

    def flush_taken(self, link: Link) -> None:
        """Report what was taken and dropped on ``link`` since the last report (the node
        does it when the transport takes its output: :meth:`NodeCore.take_output`)."""
        if (link.taken_out or link.dropped_out) and link.state is not State.CLOSED:
            self._send_taken(link, final=False)

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
            limit = min(limit, whole - 20 - len(head))
        lens = m.batch_lengths(payloads)  # (the BATCH body is made from them too)
        sizes = lens if lens is not None else list(map(len, payloads))
        total = sum(sizes)
        if total + 4 * n <= limit:
            node.emit(dst, m.encode_batch_with_head(head, seq, payloads, lens, total))
            return
        ends = list(accumulate(sizes, initial=0))  # ends[i]: bytes of the first i (in C)
        start = 0
        while start < n:
            # The longest run from ``start`` within the limit at 4 more bytes a message (at
            # least one message): a binary search over the running totals.
            lo, hi, base = start + 1, n, ends[start] + 4 * start
            while lo < hi:
                mid = (lo + hi + 1) >> 1
                if ends[mid] + 4 * mid - base <= limit:
                    lo = mid
                else:
                    hi = mid - 1
            if lo == start + 1:
                node.emit(dst, m.encode_with_head(head, seq + start, payloads[start]))
            else:
                node.emit(dst, m.encode_batch_with_head(
                    head, seq + start, payloads[start:lo],
                    None if lens is None else lens[start:lo], ends[lo] - ends[start]))
            start = lo

    def _head(self, link: Link) -> bytes:
        """The link's extended header for sequenced messages (cached per peer incarnation)."""
        inc, head = link.data_head
        if inc != link.peer_inc:
            head = m.data_head(self.tag_bytes, link.peer_tag_bytes, link.my_inc, link.peer_inc)
            link.data_head = (link.peer_inc, head)
        return head

    def check_size(self, link: Link, payload: bytes) -> None:
        """Raise MessageTooLarge if ``payload`` sent on ``link`` would not fit the transport
        (:meth:`send_on` checks it before anything changes; fan-outs check every link first)."""
        size = m.data_size(self.tag_bytes, link.peer_tag_bytes, payload)
        if size > self.node.max_message_size:
            raise MessageTooLarge(f"a {size}-byte message > max_message_size "
                                  f"{self.node.max_message_size}")

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

    def delivered_from(self, link: Link, count: int = 1) -> None:
        """Call when the application took ``count`` messages from ``link`` (returns
        credits; those sent with a cookie are reported taken). A pattern accounts for every
        DATA it was handed, in the order it was handed them on each link, through this or
        :meth:`dropped_from`."""
        self.stats["delivered"] += count
        self._returned(link, count)
        if link.confirm_q:
            self._account(link, link.taken_out)

    def dropped_from(self, link: Link, count: int = 1) -> None:
        """Call when a pattern dropped ``count`` messages of ``link`` without giving them to
        the application (a SUB's unsubscribed topic, a request whose requester left):
        their credits return, and those sent with a cookie are reported NOT_DELIVERED."""
        self._returned(link, count)
        if link.confirm_q:
            self._account(link, link.dropped_out)

    def _hold_ahead(self, link: Link, count: int, offset: int) -> None:
        """The next ``count`` messages of ``link`` go to the runtime's inbox at ``offset``:
        the flagged ones among them wait there to be reported (:attr:`ahead_flags`)."""
        q = link.confirm_q
        base = link.recv.delivered
        end = base + count
        flags = self.ahead_flags
        while q and q[0][0] <= end:
            index, s = q.popleft()
            flags.append((self.ahead_base + offset + index - base - 1, link, s))
            link.ahead += 1

    def taken_ahead(self, link: Link, seq: int, taken: bool = True) -> None:
        """The application took (``taken``; else: the inbox dropped) a flagged message read
        ahead (:attr:`ahead_flags`)."""
        link.ahead -= 1
        (link.taken_out if taken else link.dropped_out).append(seq)
        if link.state is State.CLOSED:  # its final word waits for the last of these
            self._send_taken(link, final=not link.ahead and not link.confirm_q
                             and link not in self._late)
        elif len(link.taken_out) + len(link.dropped_out) == 1:
            self.node.cork_taken(self, link)

    def taken_ahead_many(self, flags: list[tuple[int, Link, int]], start: int, end: int,
                         taken: bool = True) -> None:
        """:meth:`taken_ahead` for ``flags[start:end]``."""
        for i in range(start, end):
            _, link, seq = flags[i]
            self.taken_ahead(link, seq, taken)

    def not_taken(self, link: Link) -> None:
        """The message just taken from ``link`` (:meth:`next_from_links`) was not given to
        the application after all: as :meth:`dropped_from` instead of taken."""
        s = link.last_taken
        if s and link.taken_out and link.taken_out[-1] == s:
            link.taken_out.pop()
            link.dropped_out.append(s)  # (the link waits for the output already)
        link.last_taken = 0

    def _returned(self, link: Link, count: int) -> None:
        flow = link.recv.on_delivered(self.node.now, count)
        # Credits are useless once the peer unlinked (its goal is fixed: it sends no more
        # DATA); such a FLOW would only keep this node waiting for a peer that may be gone.
        if flow is not None and link.state is not State.CLOSED and link.peer_goal is None:
            self._send_flow(link, flow)

    def _account(self, link: Link, out: list[int]) -> None:
        """Flagged messages up to the link's delivered count go to ``out`` (taken or
        dropped), reported in a TAKEN at the node's next output."""
        q = link.confirm_q
        upto = link.recv.delivered
        link.last_taken = 0
        moved = False
        first = not link.taken_out and not link.dropped_out
        while q and q[0][0] <= upto:
            index, s = q.popleft()
            out.append(s)
            moved = True
            if index == upto:
                link.last_taken = s
        if not moved:
            return
        if link.state is State.CLOSED:  # a late one: the link ended while a pattern held it
            if not q:
                if link in self._late:
                    self._late.remove(link)
                self._send_taken(link, final=True)
            else:
                self._send_taken(link, final=False)
        elif first:
            self.node.cork_taken(self, link)

    def _send_taken(self, link: Link, final: bool) -> None:
        """Report what was taken and dropped on ``link`` since the last report."""
        chunks = taken_chunks(link.taken_out, link.dropped_out)
        link.taken_out = []
        link.dropped_out = []
        for i, (taken, dropped) in enumerate(chunks):
            link.takens_sent += 1
            body = encode_taken(final and i == len(chunks) - 1, link.takens_sent, taken,
                                dropped)
            self.node.emit(link.peer[0], m.encode_control_with_head(self._head(link), m.TAKEN,
                                                                    body))

    def link_ring(self) -> list[Link]:
        """Every link, in a stable order (rebuilt only when links come and go)."""
        if self._ring is None:
            self._ring = list(self.links.values())
        return self._ring

    def established_links(self) -> list[Link]:
        return [lk for lk in self.links.values() if lk.state is State.ESTABLISHED]

    def protocol_violation(self, link: Link, why: str) -> None:
        """The peer broke the rules: close the link at once and tell it (never answered)."""
        self.violations += 1
        self.node.log(f"{self.tag}: closing link to {link.peer}: {why}")
        self._emit(link.peer, Message(m.ERROR, self.tag, link.peer[1], link.my_inc,
                                      link.peer_inc, code=m.ERR_PROTOCOL,
                                      payload=why.encode()[:200]))
        self._abort(link)

    # ================================================================ runtime-facing API

    def link(self, peer: PeerId, now: float) -> None:
        """Start linking with ``peer`` (no-op when linking or linked already)."""
        if self.closed:
            raise UsageError("socket is closed")
        if peer[0] == self.node.node_id and peer[1] == self.tag:
            raise UsageError("a socket cannot link with itself")
        link = self.links.get(peer)
        if link is not None:
            if link.state is State.UNLINKING:
                raise UsageError(f"link to {peer} is closing; link again once it closed")
            link.unlink_wanted = False
            return
        self.refusals.pop(peer, None)
        self.retry_at.pop(peer, None)
        self._start_link(peer)

    def unlink(self, peer: PeerId, now: float) -> None:
        """Unlink from ``peer`` without losing what is in flight either way."""
        self.retry_at.pop(peer, None)
        self._retry_count.pop(peer, None)
        self._relink.discard(peer)
        link = self.links.get(peer)
        if link is None:
            return
        if link.state is State.LINKING:
            link.unlink_wanted = True  # decided once the handshake ends
        elif link.state is State.ESTABLISHED:
            self._start_unlink(link)

    def close(self, now: float) -> None:
        """Refuse new links and unlink every link gracefully."""
        self.closed = True
        self.retry_at.clear()
        for peer in list(self.links):
            self.unlink(peer, now)
        late, self._late = self._late, []
        for link in late:  # held by the pattern: the application will not take them now
            self._final_word(link)

    @property
    def is_drained(self) -> bool:
        """After close: every link has closed, and every cookie's outcome is known."""
        return not self.links and not self.jar.out

    def try_send(self, payload: bytes, cookie: object | None = None, **kw: Any) -> bool:
        """Send now if a link takes it (False: it must wait). ``cookie``: the outcome of the
        message, per peer it went to, comes back with it (:meth:`take_cookies`)."""
        if not self.sends:
            raise UsageError(f"a {self.kind} socket cannot send")
        if self.closed:
            raise UsageError("socket is closed")
        if kw:
            self.check_send_keywords(kw)
        if len(payload) > self.node.max_message_size - m.DATA_OVERHEAD_MAX:
            raise MessageTooLarge(
                f"{len(payload)} bytes > the largest message this node sends "
                f"({self.node.max_message_size - m.DATA_OVERHEAD_MAX} bytes)")
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

    def try_send_many(self, payloads: list[bytes], cookies: list[Any] | None = None,
                      **kw: Any) -> int:
        """Send the first messages of ``payloads`` that can go now; returns how many.
        ``cookies``: one per message (None: that message has none)."""
        if not self.sends:
            raise UsageError(f"a {self.kind} socket cannot send")
        if self.closed:
            raise UsageError("socket is closed")
        if kw:
            self.check_send_keywords(kw)
        if not payloads:
            return 0
        largest = max(map(len, payloads))
        if largest > self.node.max_message_size - m.DATA_OVERHEAD_MAX:
            raise MessageTooLarge(
                f"{largest} bytes > the largest message this node sends "
                f"({self.node.max_message_size - m.DATA_OVERHEAD_MAX} bytes)")
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
            k = min(link.send.edge - link.send.sent, n - sent)
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

    def check_send_keywords(self, kw: dict[str, Any]) -> None:
        """TypeError for a keyword this pattern's send does not take (``send_keywords``)."""
        for name in kw:
            if name not in self.send_keywords:
                raise TypeError(f"{self.kind} send() got an unexpected keyword argument "
                                f"{name!r}")

    def take_cookies(self, max_items: int) -> list[Cookie]:
        """Up to ``max_items`` outcomes of messages sent with a cookie, in the order they
        became known."""
        return self.jar.take(max_items)

    @property
    def cookies_ready(self) -> bool:
        return bool(self.jar.ready)

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

    @property
    def writable(self) -> bool:
        return self.sends and not self.closed and self.pattern_can_send()

    def send_room(self) -> int:
        """How many messages sends would take now without waiting: the credits of the
        established links where the default send hooks share messages out; 0 where a
        pattern has its own (they decide per message), and once closed."""
        if not self._batch_send or self.closed or not self.sends:
            return 0
        ring = self._ring if self._ring is not None else self.link_ring()
        return sum(lk.send.edge - lk.send.sent for lk in ring if lk.can_send)

    def link_state(self, peer: PeerId) -> State | None:
        link = self.links.get(peer)
        return None if link is None else link.state

    def is_linked(self, peer: PeerId | None = None) -> bool:
        if peer is None:
            return any(lk.state is State.ESTABLISHED for lk in self.links.values())
        link = self.links.get(peer)
        return link is not None and link.state is State.ESTABLISHED

    def fatal_refusal(self, peer: PeerId | None = None) -> int | None:
        """A fatal refusal that ended linking with ``peer`` (or with every peer tried)."""
        if peer is not None:
            code = self.refusals.get(peer)
            return code if code is not None and is_fatal(code) else None
        if self.links or self.retry_at or not self.refusals:
            return None
        codes = [c for c in self.refusals.values() if is_fatal(c)]
        return codes[0] if len(codes) == len(self.refusals) else None

    def get_option(self, name: str) -> Any:
        if hasattr(self.options, name):
            return getattr(self.options, name)
        extra = self.extra_options()
        if name in extra:
            return extra[name]
        raise UsageError(f"unknown option {name!r} for a {self.kind} socket")

    def set_option(self, name: str, value: Any) -> None:
        if not hasattr(self.options, name):
            self.set_pattern_option(name, value)
            return
        if name == "capacity":
            if not isinstance(value, int) or value < 1:
                raise UsageError("capacity must be an int >= 1")
            for link in self.links.values():
                flow = link.recv.set_capacity(value)
                if flow is not None and link.state in (State.ESTABLISHED, State.UNLINKING):
                    self._send_flow(link, flow)
        elif name == "max_cookies":
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise UsageError("max_cookies must be an int >= 1")
            self.jar.limit = value
        elif name == "keepalive_s":
            if not isinstance(value, (int, float)) or isinstance(value, bool) or value < 0:
                raise UsageError("keepalive_s must be a number >= 0")
            setattr(self.options, name, value)
            if value > 0:  # (a new period: every established link's deadline follows it)
                for link in self.links.values():
                    if link.state is State.ESTABLISHED:
                        link.ka_at = INF
                        self._arm_keepalive(link, max(link.last_active, link.pinged_at) + value)
            return
        elif name == "capacity_max":
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise UsageError("capacity_max must be an int >= 0")
            for link in self.links.values():
                link.recv.limit = value
        setattr(self.options, name, value)

    def next_timer(self) -> float | None:
        t = INF
        heap = self._retry_heap
        retry_at = self.retry_at
        while heap:
            rt, _, peer = heap[0]
            if retry_at.get(peer) == rt:
                t = rt
                break
            heappop(heap)  # stale: linked, cancelled or moved since
        kh = self._ka_heap
        while kh:
            kt, _, link = kh[0]
            if link.ka_at == kt:
                if kt < t:
                    t = kt
                break
            heappop(kh)
        return None if t == INF else t

    def handle_timer(self, now: float) -> None:
        heap = self._retry_heap
        retry_at = self.retry_at
        while heap and heap[0][0] <= now:
            t, _, peer = heappop(heap)
            self.timer_looks += 1
            if retry_at.get(peer) != t:
                continue
            del retry_at[peer]
            if not self.closed and peer not in self.links:
                self._start_link(peer)
        if self._ka_heap and self._ka_heap[0][0] <= now:
            self._keepalive(now)

    def _arm_keepalive(self, link: Link, t: float) -> None:
        """``link``'s keepalive deadline is ``t`` (one heap entry; an earlier one stays)."""
        if t < link.ka_at:
            link.ka_at = t
            self._timer_seq += 1
            heappush(self._ka_heap, (t, self._timer_seq, link))

    def _keepalive(self, now: float) -> None:
        """PING each established link quiet for ``keepalive_s``: only the links whose
        deadline came are looked at (a heap, one entry per link); a link with traffic since
        its deadline was set is put back at its last activity plus the period, unpinged."""
        period = self.options.keepalive_s
        heap = self._ka_heap
        while heap and heap[0][0] <= now:
            t, _, link = heappop(heap)
            self.timer_looks += 1
            if link.ka_at != t:
                continue  # stale
            link.ka_at = INF
            if period <= 0 or link.state is not State.ESTABLISHED \
                    or self.links.get(link.peer) is not link:
                continue
            due = max(link.last_active, link.pinged_at) + period
            if now >= due:
                link.pinged_at = now
                self._emit(link.peer, Message(m.PING, self.tag, link.peer[1], link.my_inc,
                                              link.peer_inc))
                due = now + period
            self._arm_keepalive(link, due)

    # ================================================================ losing a peer

    def link_lost(self, peer: PeerId, my_inc: int, not_delivered: list[int] | None = None
                  ) -> None:
        """A message of the link ``(peer, my_inc)`` may or may not have been delivered (the
        transport says so when the peer's node crashed): the link cannot keep its promises
        (order, delivery goal) any more, so it ends now, as if the peer had aborted it.
        ``not_delivered``: the sequence numbers the transport gave up before they left."""
        if not_delivered:
            self.jar.not_delivered(peer, my_inc, not_delivered)
        link = self.links.get(peer)
        if link is not None and link.my_inc == my_inc:
            self.on_link_lost(link, unknown_outcome=True)
            self._lose(link)

    def peer_lost(self, node_id: str) -> None:
        """The node ``node_id`` stopped answering: every link to it ends now."""
        peers = self._by_node.get(node_id)
        for link in [self.links[p] for p in peers] if peers else []:
            self.on_link_lost(link, unknown_outcome=False)
            self._lose(link)
        if self.jar.out:
            self.jar.node_lost(node_id)

    def _lose(self, link: Link) -> None:
        # Messages already delivered stay readable; a link this side initiated is tried
        # again (randomised back-off), so it comes back with the peer.
        retry = (link.initiator and not link.unlink_wanted and not self.closed
                 and link.state is not State.UNLINKING)
        self._abort(link)
        if retry:
            self._schedule_retry(link.peer)

    # ================================================================ message handling

    def handle(self, node_id: str, msg: Message, now: float) -> None:
        """A message for this socket from socket ``msg.src_tag`` of node ``node_id``."""
        peer = (node_id, msg.src_tag)
        t = msg.type
        if t == m.LINK:
            self._on_link(peer, msg, now)
            return
        if t == m.TAKEN:  # for the sending side of a link, which may have ended already
            got = msg.extra.get("taken")  # (m.decode parsed the body)
            if isinstance(got, tuple):
                report = cast(TakenReport, got)
                self.jar.on_taken(peer, msg.dst_inc, report[0], report[1], report[2],
                                  report[3])
            return
        link = self.links.get(peer)
        if t == m.ERROR:
            self._on_error(peer, link, msg, now)
            return
        if link is None or msg.dst_inc != link.my_inc:
            if t in m.SEQUENCED or t == m.PING:
                # Seed 000: "socket not linked" (never in answer to an ERROR).
                self._emit(peer, Message(m.ERROR, self.tag, peer[1], 0, msg.src_inc,
                                         code=m.ERR_SOCKET_NOT_LINKED, about=t))
            return  # an old LINKACK, UNLINK or FLOW: influences nothing (seed 003)
        if link.state is State.LINKING and t != m.LINKACK and not self._implicit_accept(link, msg):
            return
        link.last_active = now
        if t in m.SEQUENCED:
            self._on_sequenced(link, t, msg.seq, msg.payload)
        elif t == m.FLOW:
            link.send.on_flow(msg.flow_seq, msg.edge)
        elif t == m.LINKACK:
            self._on_linkack(link, msg)
        elif t == m.UNLINK:
            self._on_unlink(link, msg)

    # ---------------------------------------------------------------- handshake

    def _my_meta(self) -> Metadata:
        meta: Metadata = {"type": self.kind, "credits": self.options.capacity,
                          "ordered": self.options.ordered, "batch": True}
        meta.update(self.link_metadata())
        return meta

    def _new_link(self, peer: PeerId, initiator: bool) -> Link:
        link = Link(peer, self.node.next_incarnation(), initiator, self.options.capacity,
                    self.options.ordered, self.options.capacity_max, self.node.credit_budget,
                    partial(self.node.rtt, peer[0]))
        link.peer_tag_bytes = m.encoded_tag(peer[1])
        self.links[peer] = link
        by_node = self._by_node.get(peer[0])
        if by_node is None:
            self._by_node[peer[0]] = {peer}
        else:
            by_node.add(peer)
        self._ring = None
        return link

    def _start_link(self, peer: PeerId) -> None:
        link = self._new_link(peer, initiator=True)
        link.my_meta_sent = True
        self._emit(peer, Message(m.LINK, self.tag, peer[1], link.my_inc, 0, meta=self._my_meta()))

    def _decide(self, link: Link) -> int:
        meta = link.peer_meta or {}
        codes: list[int] = []
        if self.closed:
            codes.append(CLOSED_SOCKET)
        if link.unlink_wanted:
            codes.append(CANCELLED)
        credits = meta.get("credits")
        if meta.get("type") not in self.peers or not isinstance(credits, int) or credits < 1 \
                or isinstance(credits, bool):
            codes.append(INCOMPATIBLE)
        if not link.initiator and not self.options.incoming:
            codes.append(INCOMING_NOT_ALLOWED)
        limit = self.options.max_links or self.pattern_max_links
        if self.pattern_max_links:
            limit = min(limit, self.pattern_max_links)
        if limit:
            others = sum(1 for lk in self.links.values()
                         if lk is not link and lk.state is not State.CLOSED)
            if others >= limit:
                codes.append(LINK_LIMIT)
        custom = self.check_link(link.peer, meta)
        if custom != OK:
            codes.append(custom)
        return most_severe(codes)

    def _answer(self, link: Link) -> None:
        """Decide on the peer's metadata and send our LINKACK (with our metadata if unsent)."""
        code = self._decide(link)
        link.my_decision = code
        meta = None if link.my_meta_sent else self._my_meta()
        link.my_meta_sent = True
        self._emit(link.peer, Message(m.LINKACK, self.tag, link.peer[1], link.my_inc,
                                      link.peer_inc, code=code, meta=meta))
        if code != OK:
            self._refused(link, code, by_peer=False)
        elif link.peer_decision == OK:
            self._establish(link)

    def _on_link(self, peer: PeerId, msg: Message, now: float) -> None:
        link = self.links.get(peer)
        if link is not None:
            if link.state is State.LINKING and link.peer_meta is None and (
                    link.peer_inc in (0, msg.src_inc)):
                # Simultaneous LINK, or the LINK that follows an early LINKACK.
                link.peer_inc = msg.src_inc
                link.peer_meta = msg.meta
                self._answer(link)
                return
            if msg.src_inc == link.peer_inc:
                return
            if link.state is State.UNLINKING:
                # The peer links again before our unlink finished: retry later (non-fatal).
                self._emit(peer, Message(m.LINKACK, self.tag, peer[1], link.my_inc,
                                         msg.src_inc, code=ALREADY_LINKED))
                return
            # A newer incarnation: the peer lost its side of our link.
            self._abort(link)
        link = self._new_link(peer, initiator=False)
        link.peer_inc = msg.src_inc
        link.peer_meta = msg.meta
        self._answer(link)

    def _on_linkack(self, link: Link, msg: Message) -> None:
        if link.state is not State.LINKING:
            return
        if msg.code != OK:
            link.peer_decision = msg.code
            self._refused(link, msg.code, by_peer=True)
            return
        link.peer_decision = OK
        link.peer_inc = msg.src_inc
        if msg.meta is not None:
            link.peer_meta = msg.meta
        if link.peer_meta is None:
            return  # LINKACK before LINK: wait for the LINK that carries the metadata
        if link.my_decision is None:
            self._answer(link)
        elif link.my_decision == OK:
            self._establish(link)

    def _implicit_accept(self, link: Link, msg: Message) -> bool:
        """A message other than LINKACK on a linking link (seed 003's DATA before LINKACK)."""
        if msg.type == m.UNLINK:
            # The peer gave up while linking: answer and close.
            if not link.unlink_sent:
                self._emit(link.peer, Message(m.UNLINK, self.tag, link.peer[1], link.my_inc,
                                              link.peer_inc, goal=0))
            self._close(link, Ev.UNLINK_PEER)
            return False
        if link.my_decision == OK and link.peer_meta is not None:
            link.peer_decision = OK  # it only sends after deciding positively
            self._establish(link)
            return link.state is not State.CLOSED
        return False

    def _establish(self, link: Link) -> None:
        link.advance(Ev.ESTABLISH)
        link.last_active = self.node.now
        if self.options.keepalive_s > 0:
            self._arm_keepalive(link, self.node.now + self.options.keepalive_s)
        meta = link.peer_meta or {}
        credits = meta.get("credits", 0)
        link.send.edge = credits if isinstance(credits, int) else 0
        link.ordered = self.options.ordered and bool(meta.get("ordered", True))
        link.batches = meta.get("batch") is True
        self.refusals.pop(link.peer, None)
        self._retry_count.pop(link.peer, None)
        self.on_link_added(link)
        if link.unlink_wanted or self.closed:
            self._start_unlink(link)

    def _refused(self, link: Link, code: int, by_peer: bool) -> None:
        self.refusals[link.peer] = code
        wanted = link.unlink_wanted
        self._close(link, Ev.REFUSE)
        if by_peer and not is_fatal(code) and link.initiator and not wanted and not self.closed:
            self._schedule_retry(link.peer)

    def _schedule_retry(self, peer: PeerId) -> None:
        n = self._retry_count.get(peer, 0)
        self._retry_count[peer] = n + 1
        delay = min(self.options.retry_base_s * (2 ** n), self.options.retry_max_s)
        delay *= 0.5 + self.rng.random()  # randomised so two sockets do not retry in step
        t = self.retry_at[peer] = self.node.now + delay
        self._timer_seq += 1
        heappush(self._retry_heap, (t, self._timer_seq, peer))

    # ---------------------------------------------------------------- unlink

    def _start_unlink(self, link: Link) -> None:
        link.advance(Ev.UNLINK_LOCAL)
        self.on_link_removed(link)
        link.unlink_sent = True
        self._emit(link.peer, Message(m.UNLINK, self.tag, link.peer[1], link.my_inc,
                                      link.peer_inc, goal=link.last_seq_sent))
        self._try_finish(link)

    def _on_unlink(self, link: Link, msg: Message) -> None:
        link.peer_goal = msg.goal
        if link.state is State.ESTABLISHED:
            link.advance(Ev.UNLINK_PEER)
            self.on_link_removed(link)
            if link.initiator and self.options.reconnect and not self.closed:
                self._relink.add(link.peer)  # the peer went away: link again, as zmq does
        if not link.unlink_sent:
            link.unlink_sent = True
            self._emit(link.peer, Message(m.UNLINK, self.tag, link.peer[1], link.my_inc,
                                          link.peer_inc, goal=link.last_seq_sent))
        self._try_finish(link)

    def _try_finish(self, link: Link) -> None:
        if (link.state is State.UNLINKING and link.unlink_sent and link.peer_goal is not None
                and link.processed >= link.peer_goal):
            link.advance(Ev.GOAL_REACHED)
            self._forget(link, graceful=True)

    # ---------------------------------------------------------------- data path

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
                try:
                    payload = m.split_batch(payload)
                except ProtocolViolation as exc:
                    self.protocol_violation(link, str(exc))
                    return
            span = len(payload)
            room = link.recv.max_edge - link.recv.received
            if span > room:  # what its credits covered is kept, as for DATA one by one
                if room > 0:
                    self._on_sequenced(link, mtype, seq, payload[:room])
                if not link.closed:  # (the part it could send may have ended the link)
                    self.protocol_violation(link, "sent beyond its credits")
                return
            link.recv.on_arrival(sum(map(len, payload)), span)
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

    def _send_flow(self, link: Link, flow: tuple[int, int]) -> None:
        self._emit(link.peer, Message(m.FLOW, self.tag, link.peer[1], link.my_inc,
                                      link.peer_inc, flow_seq=flow[0], edge=flow[1]))

    # ---------------------------------------------------------------- errors and closing

    def _on_error(self, peer: PeerId, link: Link | None, msg: Message, now: float) -> None:
        """An ERROR from the peer: never answered with an ERROR."""
        if link is None:
            return
        if msg.code == m.ERR_SOCKET_NOT_FOUND:
            if link.state is State.LINKING:
                self._refused(link, NOT_FOUND, by_peer=True)  # may appear later: retry
            else:
                if link.initiator and self.options.reconnect and not link.unlink_wanted:
                    self._relink.add(peer)
                self._abort(link)
        elif msg.about == m.PING and link.state is not State.ESTABLISHED:
            # A PING sent while established, answered after this side began unlinking (the
            # peer finished first): the unlink ends the link, with its delivery goal.
            return
        elif msg.code in (m.ERR_SOCKET_NOT_LINKED, m.ERR_PROTOCOL) and msg.dst_inc in (
                0, link.my_inc):
            was_initiator = link.initiator and link.state is not State.UNLINKING
            self._abort(link)
            if was_initiator and not self.closed and msg.code == m.ERR_SOCKET_NOT_LINKED:
                self._schedule_retry(peer)

    def _abort(self, link: Link) -> None:
        if link.state is State.ESTABLISHED:
            self.on_link_removed(link)
        self._close(link, Ev.ABORT)

    def _close(self, link: Link, ev: Ev) -> None:
        if link.state is not State.CLOSED:
            link.advance(ev)
        self._forget(link)

    def _forget(self, link: Link, graceful: bool = False) -> None:
        if self.links.get(link.peer) is link:
            del self.links[link.peer]
            by_node = self._by_node.get(link.peer[0])
            if by_node is not None:
                by_node.discard(link.peer)
                if not by_node:
                    del self._by_node[link.peer[0]]
            self._ring = None
        if not graceful:  # DATA not handed on yet stays here: the link cannot carry it
            never_left = (list(range(link.pending_seq, link.pending_seq + len(link.pending)))
                          if link.pending else [])
            link.pending = []
        else:
            never_left = []
        if self.jar.out and self.jar.outstanding(link.peer, link.my_inc):
            self.jar.link_ended(link.peer, link.my_inc, never_left, graceful)
        if link.confirm_q or link.takens_sent or link.taken_out or link.dropped_out or link.ahead or (
                link.reorder and any(t > 0xFF for t, _ in link.reorder.values())):
            self._final_word(link)
        link.recv.release()
        for payload in link.inq:
            self.orphans.append(Received(payload, link.peer))
        link.inq.clear()
        link.reorder.clear()
        if link.peer in self._relink:
            self._relink.discard(link.peer)
            if not self.closed:
                self._schedule_retry(link.peer)

    def _final_word(self, link: Link) -> None:
        """The link ended here: what was sent with a cookie and not taken will not be, unless
        a pattern holds it still (then the word follows its :meth:`delivered_from` or
        :meth:`dropped_from`, or the socket's close)."""
        for seq, (t, p) in link.reorder.items():
            if t > 0xFF:  # arrived early, never processed
                link.dropped_out.extend(range(seq, seq + (len(p) if t & 0xFF == m.BATCH else 1)))
        q = link.confirm_q
        if q and self._default_on_data:
            # The default queue: drop them from it (the rest stays readable as orphans).
            base = link.recv.delivered + 1
            flagged = {index - base for index, _ in q}
            link.inq = deque(p for i, p in enumerate(link.inq) if i not in flagged)
        elif q and not self.closed and not self._default_on_data:
            self._late.append(link)  # the pattern's own queue holds them
            if link.taken_out or link.dropped_out:
                self._send_taken(link, final=False)
            return
        link.dropped_out.extend(s for _, s in q)
        q.clear()
        self._send_taken(link, final=not link.ahead)

    def _emit(self, peer: PeerId, msg: Message) -> None:
        self.node.emit(peer[0], m.encode(msg))


__all__ = ["SocketCore", "SocketOptions", "Received", "REASONS", "CTRL_ALLOWANCE"]
