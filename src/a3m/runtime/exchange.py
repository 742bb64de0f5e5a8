"""REQ and REP's exchange, natively: lending a socket to ``a3m._native.Exchange`` and taking
it back (docs/design.md 1e, "The exchange").

A REQ or a REP socket whose links are established and quiet (nothing out of order, no
cookie's report, no observer, no local link, nobody watching its descriptor) is *lent*: its
links' counters (sequence numbers, credits, activity) and its pattern's state (the requests
waiting, the reply owed, the request outstanding) move into the native exchange, and a
request or a reply then crosses it without Python (``XSocket.send`` and ``recv``; a leader's
reads hand the socket its messages). While lent, the Python core holds none of that state;
anything else that reaches the socket takes it back first, with every counter as the core
would have it:

- a message the exchange leaves to Python (a control message, a flagged DATA, a gap), a
  timer of the socket's, a peer or a message lost (the node core's doors);
- the application's calls the exchange leaves to the core (a send with a cookie, a misuse,
  a FLOW Exon cannot take now, the socket's other methods: the pattern's doors
  ``choose_recv``, ``pattern_send``, ``pattern_can_send``, ``readable``, and the socket's
  ``unlink``, ``close``, ``set_option``).

Every door calls ``SocketCore.take_back``, which calls :meth:`Lender.take_back`.

After the call or turn that took it back the node lends it again if it qualifies
(:meth:`Lender.lend_waiting`, from the after-call and the turn).
"""

from __future__ import annotations

import os
import weakref
from collections import deque
from collections.abc import Callable
from typing import Any

from a3m.core import message as m
from a3m.core.link import Link, State
from a3m.core.node_core import NodeCore
from a3m.core.socket_core import Received, SocketCore
from a3m.patterns.reqrep import Rep, Req
from a3m.runtime import socket_calls as _calls
from a3m.runtime.sockets import Socket

#: Set to 0 to keep REQ and REP in the Python core (the exchange is not made).
EXCHANGE_ENV = "A3M_NATIVE_EXCHANGE"
KINDS: dict[type, int] = {Rep: 1, Req: 2}
#: A socket that did not qualify is looked at again after skipping twice as many chances as
#: the last time, plus one, up to this many (a socket that stays out, a REQ with two links
#: say, costs a look every so often, not on every call; a passing reason, a cookie's
#: report say, one or two calls).
MAX_SKIP = 63


def wanted() -> bool:
    return os.environ.get(EXCHANGE_ENV, "").strip() != "0"


def weak_method(obj: Any, name: str) -> Callable[[], Any]:
    """A callable that gives ``obj``'s method ``name``, or None once ``obj`` is gone: what
    the native exchange holds of the node that holds it (no cycle)."""
    ref = weakref.ref(obj)

    def method() -> Any:
        o = ref()
        return None if o is None else getattr(o, name)

    return method


def _quiet(link: Link, node_id: str) -> bool:
    """An established link with nothing but the plain exchange in flight."""
    return (link.state is State.ESTABLISHED and link.ordered and not link.reorder
            and not link.inq and not link.pending and not link.confirm_q
            and not link.taken_out and not link.dropped_out and link.ahead == 0
            and link.ctrl_pending == 0 and link.peer_goal is None and not link.unlink_wanted
            and link.peer[0] != node_id)


class Lender:
    """A node's side of its exchange: which sockets are lent, their links in row order,
    which wait to be lent again. ``table``: the lent sockets' ``a3m._native.ExchangeTable``
    (a node's ``Exchange.table``, or the simulator's own); ``core``: the node's core; ``qualifies(socket_core)``: the
    runtime's own conditions (no descriptor watched, no listener, the node open). Every
    method runs under the node's lock."""

    def __init__(self, table: Any, core: NodeCore,
                 qualifies: Callable[[SocketCore], bool]) -> None:
        self.x = table
        self.core = core
        self.qualifies = qualifies
        #: The lent sockets' links, by tag, in the order of their rows.
        self.links: dict[str, list[Link]] = {}
        #: Sockets to lend when they qualify, with the chances to skip before the next look
        #: and how many the last refusal skipped (see :data:`MAX_SKIP`).
        self.waiting: dict[SocketCore, tuple[int, int]] = {}
        self.lends = 0
        self.take_backs = 0

    def want(self, core: SocketCore) -> None:
        """Lend ``core`` as soon as it qualifies (a new REQ or REP socket)."""
        self.waiting[core] = (0, 0)

    def lendable(self, core: SocketCore) -> list[Link] | None:
        """``core``'s links in row order when it qualifies, else None."""
        kind = KINDS.get(type(core))
        if (kind is None or core.closed or core.orphans or core.node.observer is not None
                or not self.qualifies(core)):
            return None
        links = list(core.links.values())
        node_id = self.core.node_id
        if not links or not all(_quiet(lk, node_id) for lk in links):
            return None
        pat: Any = core
        if kind == 2:
            if len(links) != 1 or pat._reply is not None or pat._failed is not None:
                return None
        elif pat._owed is not None and not any(pat._owed[0] is lk for lk in links):
            return None  # (its requester went away: the reply raises LinkError, the core's)
        return links

    def lend(self, core: SocketCore, links: list[Link]) -> None:
        index = {id(lk): i for i, lk in enumerate(links)}
        rows = []
        for lk in links:
            r, s = lk.recv, lk.send
            rows.append((lk.peer[0], lk.peer[1], lk.my_inc, core._head(lk),
                         [lk.expected_seq, lk.next_seq, r.received, r.max_edge,
                          r.arrived_bytes, r.delivered, r.edge, r.capacity, r.batch, r.limit,
                          r.round_start_delivered, r.flow_seq, s.edge, s.sent, s.flow_seq,
                          lk.data_in, lk.processed],
                         [r.round_end, lk.last_active, lk.ka_at]))
        pat: Any = core
        inbox: list[tuple[int, int, bytes]] = []
        owed: tuple[int, int] | None = None
        next_id = 0
        if type(core) is Rep:
            inbox = [(index[id(lk)], ident, body) for lk, ident, body in pat._requests]
            if pat._owed is not None:
                owed = (index[id(pat._owed[0])], pat._owed[1])
        else:
            if pat._outstanding is not None:
                owed = (index[id(pat._outstanding[0])], pat._outstanding[1])
            next_id = pat._next_id
        self.x.lend(core.tag, KINDS[type(core)], rows, inbox, owed, next_id,
                    core.options.keepalive_s,
                    self.core.max_message_size - m.DATA_OVERHEAD_MAX)
        core.lent = True
        self.links[core.tag] = links
        if type(core) is Rep:
            pat._requests = deque()
            pat._owed = None
        else:
            pat._outstanding = None
        self.lends += 1

    def take_back(self, core: SocketCore) -> None:
        """The core acts on ``core`` next: its state back from the exchange, as the core
        would have it; lent again after the call or turn if it qualifies."""
        got = self.x.reclaim(core.tag)
        core.lent = False
        self.waiting[core] = (0, 0)
        links = self.links.pop(core.tag, None)
        if got is None or links is None:
            return
        self.take_backs += 1
        rows, inbox, owed, next_id, received, delivered, sent = got
        for lk, (ints, floats) in zip(links, rows, strict=True):
            r, s = lk.recv, lk.send
            (lk.expected_seq, lk.next_seq, r.received, r.max_edge, r.arrived_bytes,
             r.delivered, r.edge, r.round_start_delivered, r.flow_seq, s.edge, s.sent,
             s.flow_seq, lk.data_in, lk.processed) = ints
            r.round_end, lk.last_active = floats
        pat: Any = core
        if type(core) is Rep:
            pat._requests = deque((links[i], ident, body) for i, ident, body in inbox)
            pat._owed = None if owed is None else (links[owed[0]], owed[1])
        else:
            pat._outstanding = None if owed is None else (links[owed[0]], owed[1])
            pat._next_id = next_id
            if inbox:
                i, _, body = inbox[0]
                pat._reply = Received(body, links[i].peer)
                pat._reply_link = links[i]
        stats = core.stats
        stats["received"] += received
        stats["delivered"] += delivered
        stats["sent"] += sent

    def take_all_back(self) -> None:
        for tag in list(self.links):
            core = self.core.sockets.get(tag)
            if core is not None:
                self.take_back(core)

    def lend_waiting(self) -> None:
        """Lend the waiting sockets that qualify now (those that do not are looked at again
        later: :data:`MAX_SKIP`)."""
        waiting = self.waiting
        for core, (skip, last) in list(waiting.items()):
            if skip:
                waiting[core] = (skip - 1, last)
                continue
            if core.closed or core.lent:
                del waiting[core]
                continue
            links = self.lendable(core)
            if links is None:
                last = min(2 * last + 1, MAX_SKIP)
                waiting[core] = (last, last)
                continue
            del waiting[core]
            self.lend(core, links)


class ExchangeSocket(Socket):
    """A REQ or REP socket of a node with a native exchange: its ``send`` and ``recv`` are
    the exchange's (``a3m._native.XSocket``), one native call each while the socket is
    lent, which fall back to :meth:`Socket.send` and to :meth:`_recv_waiting`."""

    def __init__(self, node: Any, core: SocketCore, lender: Lender) -> None:
        super().__init__(node, core)
        x = node._driver.exchange.socket(core.tag, Socket.send, ExchangeSocket._recv_waiting,
                                         weakref.ref(self))
        self._x = x
        self.send = x.send  # type: ignore[method-assign]
        self.recv = x.recv  # type: ignore[method-assign]
        lender.want(core)

    def _recv_waiting(self, timeout: float | None = None) -> bytes:
        """:meth:`Socket.recv` where nothing was there (or the core must act): the wait, in
        which the exchange's ``take`` is looked at (``socket_calls.take_exchange``)."""
        return _calls.take_exchange(self, self._x, timeout)


__all__ = ["Lender", "ExchangeSocket", "EXCHANGE_ENV", "wanted"]
