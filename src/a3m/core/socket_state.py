"""The state a socket's parts share (:class:`SocketState`), and the stack they form.

A socket is one object whose class is a line of single inheritance, one part a module,
as :class:`~a3m.exon.protocol.ExonProtocol` is (single inheritance is what lets mypyc
compile them into native classes): :class:`SocketState` <- cookies (``socket_cookies``:
what became of each message) <- send path (``socket_send``) <- receive path
(``socket_recv``) <- link lifecycle (``socket_links``: handshake, keepalive, loss,
ending) <- :class:`~a3m.core.socket_core.SocketCore` (the pattern extension points and
options: what patterns subclass). A part calls the shared state and the parts below it;
the stubs at the end of :class:`SocketState` are the calls it makes into a part above.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from random import Random
from typing import Any, ClassVar

from mypy_extensions import mypyc_attr

from a3m.core import message as m
from a3m.core.link import Link, PeerId, State
from a3m.core.message import Message, Metadata
from a3m.core.node_base import NodeBase

#: Pattern control messages a peer may have waiting out of order on one link.
CTRL_ALLOWANCE = 256
INF = float("inf")


class Received:
    """A message handed to the application (a plain class, not a dataclass: see
    :class:`a3m.exon.events.Delivered`)."""

    __slots__ = ("payload", "source", "topic", "attrs")

    def __init__(self, payload: bytes, source: PeerId, topic: bytes | None = None,
                 attrs: dict[str, Any] | None = None) -> None:
        self.payload = payload
        self.source = source
        self.topic = topic
        self.attrs = attrs

    def __eq__(self, other: object) -> bool:
        if type(other) is not Received:
            return NotImplemented
        return (self.payload == other.payload and self.source == other.source
                and self.topic == other.topic and self.attrs == other.attrs)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return (f"Received(payload={self.payload!r}, source={self.source!r}, "
                f"topic={self.topic!r}, attrs={self.attrs!r})")


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
    #: An established link quiet this long (seconds) either way gets a PING *while this side
    #: waits on the peer* (a request's reply, credits, cookies' outcomes: ``awaits_peer``),
    #: which a peer that lost the link (its node restarted) answers with an ERROR: the link
    #: then ends (and is linked again, if this side initiated it). The PING also gives the
    #: transport something to deliver, so a node that stopped answering is noticed. A quiet
    #: link on which nothing waits only gets the idle probe below. 0 = no PING at all.
    keepalive_s: float = 5.0
    #: A quiet link on which nothing waits gets a PING after this long (times a jitter of
    #: 0.75-1.25 drawn per link), so links of peers that vanished are found and reclaimed
    #: (WireGuard's passive keepalive: a link that waits on nothing costs nothing in
    #: between). 0 = never.
    idle_probe_s: float = 300.0
    #: Cookies awaiting an outcome or not yet read, at most (a send with a cookie waits).
    max_cookies: int = 32768


@mypyc_attr(allow_interpreted_subclasses=True)  # the patterns subclass SocketCore
class SocketState:
    """What every part of a socket shares: its node, tag, options, links and counters,
    the queries over them, and how a control message leaves."""

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

    def __init__(self, node: NodeBase, tag: str, rng: Random | None = None) -> None:
        self.node = node
        self.tag = tag
        self.tag_bytes = m.encoded_tag(tag)
        self.rng = rng or Random(0)
        self.options = SocketOptions()
        self.links: dict[PeerId, Link] = {}
        #: The peers of ``links`` by node (a node lost ends its links without a look at all).
        self._by_node: dict[str, set[PeerId]] = {}
        #: Links with messages waiting in ``inq``, in the order they got them (each once:
        #: ``Link.ready``): receives take from here, fair, without a look at idle links.
        self._ready: deque[Link] = deque()
        self.closed = False
        self.violations = 0
        self.stats: dict[str, int] = {"sent": 0, "received": 0, "delivered": 0}
        self._ring: list[Link] | None = None
        #: Whether the default send and receive hooks are in force (SocketCore decides):
        #: then a batch of messages may go to one link as one BATCH, and be taken from the
        #: queues in one go.
        self._batch_send = True
        self._batch_recv = True
        self._default_on_data = True
        #: The default receive hooks are in force: a message carries nothing for the
        #: application but its payload and source (no topic, no group), so the runtime may
        #: take several ahead of the calls that will return them.
        self.plain_recv = True
        #: The default send hooks are in force on a socket that sends: a stream's sends may
        #: wait in the runtime's send buffer (its credits set aside), never decided per
        #: message by a pattern.
        self.plain_send = True
        #: Each send is a step of an exchange the peer answers before the next comes (a
        #: request, its reply, a survey, a response): the runtime hands it off at once and
        #: never holds it in the cork window for company, the rule for a stream's sends
        #: (``a3m.runtime.cork``). The patterns that exchange set it (REQ, REP, SURVEYOR,
        #: RESPONDENT); a custom pattern may too.
        self.exchange = False
        #: The runtime lent this socket's links and pattern state to a native exchange
        #: (``a3m.runtime.exchange``): the core holds none of it until the node's
        #: ``take_back`` gives it back, which every door of the core calls first.
        self.lent = False

    def take_back(self) -> None:
        """Before the core acts on a socket lent to a native exchange (``lent``): its state
        back from there (:attr:`NodeBase.take_back`). The core's doors call it: the node's
        for what arrives, the timers and what is lost; the pattern's and the socket's own
        for what the application asks."""
        fn = self.node.take_back
        if fn is not None:
            fn(self)
        self.lent = False

    # ================================================================ queries

    def link_ring(self) -> list[Link]:
        """Every link, in a stable order (rebuilt only when links come and go)."""
        if self._ring is None:
            self._ring = list(self.links.values())
        return self._ring

    def established_links(self) -> list[Link]:
        return [lk for lk in self.links.values() if lk.state is State.ESTABLISHED]

    def link_state(self, peer: PeerId) -> State | None:
        link = self.links.get(peer)
        return None if link is None else link.state

    def is_linked(self, peer: PeerId | None = None) -> bool:
        if peer is None:
            return any(lk.state is State.ESTABLISHED for lk in self.links.values())
        link = self.links.get(peer)
        return link is not None and link.state is State.ESTABLISHED

    # ================================================================ output

    def _head(self, link: Link) -> bytes:
        """The link's extended header for sequenced messages (cached per peer incarnation)."""
        inc, head = link.data_head
        if inc != link.peer_inc:
            head = m.data_head(self.tag_bytes, link.peer_tag_bytes, link.my_inc, link.peer_inc)
            link.data_head = (link.peer_inc, head)
        return head

    def _emit(self, peer: PeerId, msg: Message) -> None:
        self.node.emit(peer[0], m.encode(msg))

    def _send_flow(self, link: Link, flow: tuple[int, int]) -> None:
        self._emit(link.peer, Message(m.FLOW, self.tag, link.peer[1], link.my_inc,
                                      link.peer_inc, flow_seq=flow[0], edge=flow[1]))

    # ================================================================ calls into the parts above
    # The pattern's hooks (defaults and documentation: SocketCore) and the link lifecycle's
    # steps the lower parts take; each is overridden above (exon/state.py does the same).

    def on_link_added(self, link: Link) -> None:
        raise NotImplementedError

    def on_link_removed(self, link: Link) -> None:
        raise NotImplementedError

    def on_link_lost(self, link: Link, unknown_outcome: bool) -> None:
        raise NotImplementedError

    def link_metadata(self) -> Metadata:
        raise NotImplementedError

    def check_link(self, peer: PeerId, meta: Metadata) -> int:
        raise NotImplementedError

    def choose_send_link(self, payload: bytes, **kw: Any) -> Link | None:
        raise NotImplementedError

    def on_data(self, link: Link, payload: bytes) -> None:
        raise NotImplementedError

    def on_data_many(self, link: Link, payloads: list[bytes]) -> None:
        raise NotImplementedError

    def on_control(self, link: Link, mtype: int, payload: bytes) -> None:
        raise NotImplementedError

    def choose_recv(self) -> Received | None:
        raise NotImplementedError

    def orphan(self, received: Received) -> Received | None:
        raise NotImplementedError

    def pattern_can_send(self) -> bool:
        raise NotImplementedError

    def pattern_send(self, payload: bytes, **kw: Any) -> bool:
        raise NotImplementedError

    def pattern_send_many(self, payloads: list[bytes], **kw: Any) -> int:
        raise NotImplementedError

    def protocol_violation(self, link: Link, why: str) -> None:
        raise NotImplementedError

    def flush_link(self, link: Link) -> None:
        raise NotImplementedError

    def _try_finish(self, link: Link) -> None:
        raise NotImplementedError

    def _arm_keepalive(self, link: Link, t: float) -> None:
        raise NotImplementedError
