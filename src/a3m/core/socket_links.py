"""A link's life (seed 003; ``docs/links.md``): LINK / LINKACK and each side's decision,
retries after a refusal, keepalive PINGs on quiet links, UNLINK with its delivery goal,
ERRORs, and a link lost with its peer.
"""

from __future__ import annotations

from functools import partial
from heapq import heappop, heappush
from random import Random
from typing import cast

from mypy_extensions import mypyc_attr

from a3m.core import message as m
from a3m.core.cookies import TakenReport
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
from a3m.core.node_base import NodeBase
from a3m.core.socket_recv import RecvPath
from a3m.core.socket_state import INF, Received
from a3m.errors import UsageError

#: A link still linking when its socket unlinks or closes is given this long for its
#: handshake to end, then cancelled (``_cancel_linking``): close() is bounded for every state.
CANCEL_LINKING_S = 5.0


@mypyc_attr(allow_interpreted_subclasses=True)  # the patterns subclass SocketCore
class LinkLifecycle(RecvPath):
    """Links from LINK to their end: the handshake and its decision, retries, keepalives,
    unlinking with a delivery goal, errors, and a peer lost."""

    def __init__(self, node: NodeBase, tag: str, rng: Random | None = None) -> None:
        super().__init__(node, tag, rng)
        self.refusals: dict[PeerId, int] = {}  # last refusal per peer (for wait_linked)
        self.retry_at: dict[PeerId, float] = {}
        self._retry_count: dict[PeerId, int] = {}
        self._relink: set[PeerId] = set()  # peer-ended links to start again once closed
        #: Deadlines, one lazy heap entry each (stale ones are skipped): each established
        #: link's keepalive (``Link.ka_at``), each relink after a refusal (``retry_at``).
        self._ka_heap: list[tuple[float, int, Link]] = []
        self._retry_heap: list[tuple[float, int, PeerId]] = []
        self._timer_seq = 0
        #: Heap entries the timers took (diagnostics: work per turn, not per link).
        self.timer_looks = 0
        #: Keepalive PINGs sent (waits and idle probes).
        self.pings_sent = 0

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
        if self.lent:
            self.take_back()
        self.retry_at.pop(peer, None)
        self._retry_count.pop(peer, None)
        self._relink.discard(peer)
        link = self.links.get(peer)
        if link is None:
            return
        if link.state is State.LINKING:
            link.unlink_wanted = True  # decided once the handshake ends, or cancelled by
            self._arm_keepalive(link, now + CANCEL_LINKING_S)  # then (a silent peer)
        elif link.state is State.ESTABLISHED:
            self._start_unlink(link)

    def close(self, now: float) -> None:
        """Refuse new links and unlink every link gracefully."""
        if self.lent:
            self.take_back()
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

    def fatal_refusal(self, peer: PeerId | None = None) -> int | None:
        """A fatal refusal that ended linking with ``peer`` (or with every peer tried)."""
        if peer is not None:
            code = self.refusals.get(peer)
            return code if code is not None and is_fatal(code) else None
        if self.links or self.retry_at or not self.refusals:
            return None
        codes = [c for c in self.refusals.values() if is_fatal(c)]
        return codes[0] if len(codes) == len(self.refusals) else None

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
            if (self.jar.out and msg.code == m.ERR_SOCKET_NOT_LINKED
                    and (link is None or msg.dst_inc != link.my_inc)):
                # The peer knows no link of ours that ended here gracefully and awaits its
                # final word (cookies): that word will never come.
                self.jar.forgotten(peer, msg.dst_inc)
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

    def protocol_violation(self, link: Link, why: str) -> None:
        """The peer broke the rules: close the link at once and tell it (never answered)."""
        self.violations += 1
        self.node.log(f"{self.tag}: closing link to {link.peer}: {why}")
        self._emit(link.peer, Message(m.ERROR, self.tag, link.peer[1], link.my_inc,
                                      link.peer_inc, code=m.ERR_PROTOCOL,
                                      payload=why.encode()[:200]))
        self._abort(link, f"protocol violation: {why}")

    # ================================================================ timers

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

    def awaits_peer(self, link: Link) -> bool:
        """Whether this side waits on the peer over ``link`` (its quiet link then gets a PING
        every ``keepalive_s``, else only the idle probe): messages it has not handed on, its
        credits spent (a FLOW is awaited), cookies whose outcome the peer owes. Exon watches
        what is unacknowledged itself. Patterns add their own waits (REQ: its request's
        reply); a wait starts with a send, which arms the keepalive."""
        return (bool(link.pending) or link.send.edge <= link.send.sent
                or (bool(self.jar.out) and self.jar.awaiting(link.peer, link.my_inc)))

    def _keepalive_due(self, link: Link) -> float:
        """When ``link``, quiet since its last activity or PING, gets its next PING: after
        ``keepalive_s`` while this side waits on the peer, else after its idle probe's
        period (INF: neither applies)."""
        opts = self.options
        if opts.keepalive_s <= 0:
            return INF
        period = (opts.keepalive_s if self.awaits_peer(link)
                  else opts.idle_probe_s * link.ka_jitter)
        if period <= 0:
            return INF
        return max(link.last_active, link.pinged_at) + period

    def _keepalive(self, now: float) -> None:
        """PING each established link quiet for its period (``_keepalive_due``): only the
        links whose deadline came are looked at (a heap, one entry per link); a link with
        traffic since its deadline was set is put back at its new due time, unpinged."""
        heap = self._ka_heap
        while heap and heap[0][0] <= now:
            t, _, link = heappop(heap)
            self.timer_looks += 1
            if link.ka_at != t:
                continue  # stale
            link.ka_at = INF
            if self.links.get(link.peer) is not link:
                continue
            if link.state is State.LINKING:
                if link.unlink_wanted:
                    self._cancel_linking(link)
                continue
            if link.state is not State.ESTABLISHED:
                continue
            due = self._keepalive_due(link)
            if now >= due:
                link.pinged_at = now
                self.pings_sent += 1
                self._emit(link.peer, Message(m.PING, self.tag, link.peer[1], link.my_inc,
                                              link.peer_inc))
                due = self._keepalive_due(link)
            if due < INF:
                self._arm_keepalive(link, due)

    # ================================================================ handshake

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
            self._abort(link, "the peer lost its side of the link")
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
            if link.my_decision == OK and link.peer_meta is not None and msg.goal:
                # A peer unlinks only a link it holds established, and this one sent DATA
                # (its goal): its UNLINK overtook its final LINKACK, which it proves
                # positive, as a DATA would. Establish, then unlink with its goal (answering
                # it with UNLINK goal 0 and closing would drop what it sent: issue 40).
                link.peer_decision = OK
                self._establish(link)
                return link.state is not State.CLOSED
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
        link.ka_jitter = 0.75 + 0.5 * self.rng.random()
        due = self._keepalive_due(link)
        if due < INF:
            self._arm_keepalive(link, due)
        meta = link.peer_meta or {}
        credits = meta.get("credits", 0)
        link.send.edge = credits if isinstance(credits, int) else 0
        link.ordered = self.options.ordered and bool(meta.get("ordered", True))
        link.batches = meta.get("batch") is True
        self.refusals.pop(link.peer, None)
        self._retry_count.pop(link.peer, None)
        self.on_link_added(link)
        self.node.note_link("linked", self.tag, link.peer, "")
        if link.unlink_wanted or self.closed:
            self._start_unlink(link)

    def _cancel_linking(self, link: Link) -> None:
        """``link``, unlinked (or its socket closed) while linking, waited
        :data:`CANCEL_LINKING_S` for its handshake to end: a peer node that is up but never
        answers would hold the close for ever. Cancelled here; no message travels on a link
        before it is established, so nothing is lost. A peer that answered (its incarnation
        is known) is told with an UNLINK (goal 0), which closes its side."""
        if link.peer_inc:
            link.unlink_sent = True
            self._emit(link.peer, Message(m.UNLINK, self.tag, link.peer[1], link.my_inc,
                                          link.peer_inc, goal=0))
        self._refused(link, CANCELLED, by_peer=False)

    def _refused(self, link: Link, code: int, by_peer: bool) -> None:
        self.refusals[link.peer] = code
        wanted = link.unlink_wanted
        self._close(link, Ev.REFUSE)
        if by_peer or not (wanted or self.closed):  # (not our own cancel at close or unlink)
            self.node.note_link("link_refused", self.tag, link.peer,
                                f"{REASONS.get(code, hex(code))} "
                                f"({'by the peer' if by_peer else 'here'})")
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

    # ================================================================ ending

    def _start_unlink(self, link: Link) -> None:
        link.advance(Ev.UNLINK_LOCAL)
        self.on_link_removed(link)
        if link.pending:  # corked DATA leaves before the UNLINK that names its goal
            self.flush_link(link)
        link.unlink_sent = True
        self._emit(link.peer, Message(m.UNLINK, self.tag, link.peer[1], link.my_inc,
                                      link.peer_inc, goal=link.last_seq_sent))
        self._try_finish(link)

    def _on_unlink(self, link: Link, msg: Message) -> None:
        link.peer_goal = msg.goal
        if link.state is State.ESTABLISHED:
            link.advance(Ev.UNLINK_PEER)
            self.on_link_removed(link)
            if link.pending:  # corked DATA leaves before the UNLINK that names its goal
                self.flush_link(link)
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
            self.node.note_link("unlinked", self.tag, link.peer, "unlinked")

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
                self._abort(link, "the peer socket is gone")
        elif msg.about == m.PING and link.state is not State.ESTABLISHED:
            # A PING sent while established, answered after this side began unlinking (the
            # peer finished first): the unlink ends the link, with its delivery goal.
            return
        elif msg.code in (m.ERR_SOCKET_NOT_LINKED, m.ERR_PROTOCOL) and msg.dst_inc in (
                0, link.my_inc):
            was_initiator = link.initiator and link.state is not State.UNLINKING
            self._abort(link, "the peer does not know the link"
                        if msg.code == m.ERR_SOCKET_NOT_LINKED else "the peer's protocol error")
            if was_initiator and not self.closed and msg.code == m.ERR_SOCKET_NOT_LINKED:
                self._schedule_retry(peer)

    def link_lost(self, peer: PeerId, my_inc: int, not_delivered: list[int] | None = None,
                  reason: str = "") -> None:
        """A message of the link ``(peer, my_inc)`` may or may not have been delivered (the
        transport says so when the peer's node crashed): the link cannot keep its promises
        (order, delivery goal) any more, so it ends now, as if the peer had aborted it.
        ``not_delivered``: the sequence numbers the transport gave up before they left."""
        if not_delivered:
            self.jar.not_delivered(peer, my_inc, not_delivered)
        link = self.links.get(peer)
        if link is not None and link.my_inc == my_inc:
            self.on_link_lost(link, unknown_outcome=True)
            self._lose(link, reason or "a message to the peer was lost (its node "
                             "restarted or was given up)")

    def peer_lost(self, node_id: str, reason: str = "peer lost") -> None:
        """The node ``node_id`` stopped answering (or restarted): every link to it ends now."""
        peers = self._by_node.get(node_id)
        for link in [self.links[p] for p in peers] if peers else []:
            self.on_link_lost(link, unknown_outcome=False)
            self._lose(link, reason)
        if self.jar.out:
            self.jar.node_lost(node_id)

    def _lose(self, link: Link, reason: str) -> None:
        # Messages already delivered stay readable; a link this side initiated is tried
        # again (randomised back-off), so it comes back with the peer.
        retry = (link.initiator and not link.unlink_wanted and not self.closed
                 and link.state is not State.UNLINKING)
        self._abort(link, reason)
        if retry:
            self._schedule_retry(link.peer)

    def _abort(self, link: Link, reason: str = "aborted") -> None:
        was = link.state
        if was is State.ESTABLISHED:
            self.on_link_removed(link)
        self._close(link, Ev.ABORT)
        if was is State.ESTABLISHED or was is State.UNLINKING:
            self.node.note_link("unlinked", self.tag, link.peer, reason)

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
