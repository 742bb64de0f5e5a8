"""REQ / REP: one outstanding request per REQ; REP answers in order, strictly alternating.

Each request carries an id (u32 before the body) that the reply echoes. A REQ whose link closes
while its request is unanswered gets a :class:`~a3m.errors.LinkError` from ``recv`` instead of
a hang; misuse (a second request before the reply, a reply without a request) raises
:class:`~a3m.errors.UsageError` at once.
"""

from __future__ import annotations

from collections import deque
from random import Random
from typing import Any

from mypy_extensions import mypyc_attr

from a3m.core.link import Link
from a3m.core.node_core import NodeCore
from a3m.core.socket_core import Received, SocketCore
from a3m.errors import LinkError, UsageError
from a3m.patterns.framing import split_id, with_id


@mypyc_attr(allow_interpreted_subclasses=True)
class Req(SocketCore):
    kind = "REQ"
    peers = frozenset({"REP"})

    def __init__(self, node: NodeCore, tag: str, rng: Random | None = None,
                 **options: Any) -> None:
        super().__init__(node, tag, rng, **options)
        self._next_id = self.rng.randrange(1 << 32)
        self.exchange = True  # (a request, a reply: handed off at once, never corked)
        self._outstanding: tuple[Link, int] | None = None
        self._reply: Received | None = None
        self._reply_link: Link | None = None
        self._failed: str | None = None

    def pattern_send(self, payload: bytes, **kw: Any) -> bool:
        if self.lent:  # (lent to the runtime's native exchange: back first)
            self.take_back()
        if self._outstanding is not None or self._reply is not None:
            raise UsageError("REQ: a request is outstanding; receive its reply first")
        link = self.choose_send_link(payload)
        if link is None:
            return False
        self._next_id = (self._next_id + 1) & 0xFFFFFFFF
        self._outstanding = (link, self._next_id)
        self._failed = None
        self.send_on(link, with_id(self._next_id, payload))
        return True

    def pattern_can_send(self) -> bool:
        if self.lent:  # (lent to the runtime's native exchange: back first)
            self.take_back()
        return self._outstanding is None and super().pattern_can_send()

    def on_data(self, link: Link, payload: bytes) -> None:
        framed = split_id(payload)
        out = self._outstanding
        if framed is None or out is None or out[0] is not link or framed[0] != out[1]:
            self.dropped_from(link)
            self.protocol_violation(link, "a reply to no outstanding request")
            return
        self._reply = Received(framed[1], link.peer)
        self._reply_link = link  # its credit returns when the application takes it
        self._outstanding = None

    def awaits_peer(self, link: Link) -> bool:
        """A request outstanding on ``link`` waits for its reply (keepalive PINGs find a REP
        that crashed or restarted)."""
        out = self._outstanding
        return (out is not None and out[0] is link) or super().awaits_peer(link)

    def on_link_removed(self, link: Link) -> None:
        if self._outstanding is not None and self._outstanding[0] is link:
            self._outstanding = None
            if not self.closed:  # closing this REQ is not its REP going away: recv says Closed
                self._failed = (f"the REP peer {link.peer[0]}/{link.peer[1]} went away with "
                                "the request unanswered")

    def choose_recv(self) -> Received | None:
        if self.lent:  # (lent to the runtime's native exchange: back first)
            self.take_back()
        if self._reply is not None:
            reply, self._reply = self._reply, None
            if self._reply_link is not None:
                self.delivered_from(self._reply_link)
                self._reply_link = None
            return reply
        if self._failed is not None:
            why, self._failed = self._failed, None
            raise LinkError(why)
        if self._outstanding is None and not self.closed:  # closed: the runtime says Closed
            raise UsageError("REQ: no request outstanding; send one first")
        return None

    @property
    def readable(self) -> bool:
        if self.lent:
            self.take_back()
        return self._reply is not None or self._failed is not None


@mypyc_attr(allow_interpreted_subclasses=True)
class Rep(SocketCore):
    kind = "REP"
    peers = frozenset({"REQ"})

    def __init__(self, node: NodeCore, tag: str, rng: Random | None = None,
                 **options: Any) -> None:
        super().__init__(node, tag, rng, **options)
        self._requests: deque[tuple[Link, int, bytes]] = deque()
        self.exchange = True  # (a request, a reply: handed off at once, never corked)
        self._owed: tuple[Link, int] | None = None

    def on_data(self, link: Link, payload: bytes) -> None:
        framed = split_id(payload)
        if framed is None:
            self.protocol_violation(link, "a request without an id")
            return
        self._requests.append((link, framed[0], framed[1]))

    def on_link_removed(self, link: Link) -> None:
        # Requests from a peer that went away can no longer be answered: forget them.
        # The owed request stays: the reply to it raises LinkError (the sender sees it).
        gone = sum(1 for r in self._requests if r[0] is link)
        if gone:
            self._requests = deque(r for r in self._requests if r[0] is not link)
            self.dropped_from(link, gone)

    def choose_recv(self) -> Received | None:
        if self.lent:  # (lent to the runtime's native exchange: back first)
            self.take_back()
        if self._owed is not None:
            if self._owed[0].established:
                raise UsageError("REP: reply to the last request before receiving the next")
            self._owed = None  # its requester went away: nobody waits for that reply
        while self._requests:
            link, ident, body = self._requests.popleft()
            if link.established:
                self.delivered_from(link)
                self._owed = (link, ident)
                return Received(body, link.peer)
            self.dropped_from(link)
        return None

    @property
    def readable(self) -> bool:
        if self.lent:
            self.take_back()
        owed = self._owed
        return (owed is None or not owed[0].established) and bool(self._requests)

    def pattern_send(self, payload: bytes, **kw: Any) -> bool:
        if self.lent:  # (lent to the runtime's native exchange: back first)
            self.take_back()
        if self._owed is None:
            raise UsageError("REP: no request to reply to; receive one first")
        link, ident = self._owed
        if not link.established:
            self._owed = None
            raise LinkError("REP: the requester went away; the reply cannot be delivered")
        if not link.can_send:
            return False  # bounded: the reply waits for a credit
        self._owed = None
        self.send_on(link, with_id(ident, payload))
        return True

    def pattern_can_send(self) -> bool:
        if self.lent:  # (lent to the runtime's native exchange: back first)
            self.take_back()
        # A reply whose requester went away "can be sent": the send raises LinkError at once.
        owed = self._owed
        return owed is not None and (owed[0].can_send or not owed[0].established)
