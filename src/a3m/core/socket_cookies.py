"""Cookie accounting: each message a link delivered is taken or dropped, in order; its
credit returns, and the outcome of one sent with a cookie travels back in a TAKEN
(``docs/patterns.md``, "Cookies"; ``docs/core-messages.md``).
"""

from __future__ import annotations

from collections import deque
from random import Random

from mypy_extensions import mypyc_attr

from a3m.core import message as m
from a3m.core.cookies import Cookie, CookieJar, encode_taken, taken_chunks
from a3m.core.link import Link, State
from a3m.core.node_base import NodeBase
from a3m.core.socket_state import SocketState


@mypyc_attr(allow_interpreted_subclasses=True)  # the patterns subclass SocketCore
class CookiePart(SocketState):
    """Accounts for every DATA a link delivered (taken or dropped), returns its credit, and
    reports what became of those sent with a cookie (TAKEN)."""

    def __init__(self, node: NodeBase, tag: str, rng: Random | None = None) -> None:
        super().__init__(node, tag, rng)
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

    def flush_taken(self, link: Link) -> None:
        """Report what was taken and dropped on ``link`` since the last report (the node
        does it when the transport takes its output: :meth:`NodeCore.take_output`)."""
        if (link.taken_out or link.dropped_out) and link.state is not State.CLOSED:
            self._send_taken(link, final=False)

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

    def take_cookies(self, max_items: int) -> list[Cookie]:
        """Up to ``max_items`` outcomes of messages sent with a cookie, in the order they
        became known."""
        return self.jar.take(max_items)

    @property
    def cookies_ready(self) -> bool:
        return bool(self.jar.ready)
