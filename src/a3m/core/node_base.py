"""What a node offers its sockets (:class:`NodeBase`): the time, the output, corking, the
transport's limits and measures, incarnations and the log.

Sockets (``socket_state.py`` and the parts above it) see their node through this class only;
:class:`~a3m.core.node_core.NodeCore` adds the socket registry and the routing. So the socket
modules never import the node core, and the node core imports the sockets: one direction.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from random import Random
from typing import Any, Protocol

from a3m.core import message as m
from a3m.core.credits import CreditBudget
from a3m.core.link import Link


class DeliveryObserver(Protocol):
    """Told of every DATA message a socket puts on a link and every one it accepts in order.

    A message's identity is ``(sender node, sender tag, sender link incarnation, seq)``: both
    sides know it, so the two records join (the delivery journal uses this). Called on the
    node's I/O path: keep it cheap and never raise.
    """

    def on_sent(self, tag: str, peer: tuple[str, str], inc: int, seq: int,
                size: int) -> None: ...

    def on_delivered(self, tag: str, peer: tuple[str, str], peer_inc: int, seq: int,
                     size: int) -> None: ...


class Flushable(Protocol):
    """A socket with output waiting on a link (:meth:`NodeBase.cork`)."""

    def flush_link(self, link: Link) -> None: ...

    def flush_taken(self, link: Link) -> None: ...


#: Default :attr:`NodeBase.batch_bytes`: a BATCH fits one loopback datagram (64 KiB); on a
#: path with a smaller MTU :attr:`NodeBase.unfragmented` keeps it to one datagram there.
BATCH_BYTES = 60000


class NodeBase:
    """The node as its sockets see it: messages out (:meth:`emit`, :meth:`cork`), the time
    (``now``, set by the node core before each step), and the transport's limits."""

    def __init__(self, node_id: str, rng: Random | None = None,
                 log: Callable[[str], None] | None = None,
                 max_message_size: int = 1 << 62,
                 credit_budget_bytes: int = 64 * 1024 * 1024) -> None:
        self.node_id = node_id
        self.rng = rng or Random(0)
        self.now = 0.0
        self._out: list[tuple[str, bytes]] = []
        self._corked: list[tuple[Flushable, Link]] = []  # links with DATA waiting
        #: Links with TAKEN reports waiting (cookies): they leave with the next output.
        self._taken: list[tuple[Flushable, Link]] = []
        self._local: deque[bytes] = deque()
        self._inc = 0
        self._log = log
        #: Set to a :class:`DeliveryObserver` to hear of every DATA message sent and accepted.
        self.observer: DeliveryObserver | None = None
        #: The largest message the transport takes (the runtime sets Exon's): a send that
        #: could not fit raises MessageTooLarge before it changes any state.
        self.max_message_size = max_message_size
        #: The most payload bytes (plus 4 per message) a BATCH carries: several messages sent
        #: at once to one link travel as BATCHes of up to this size.
        self.batch_bytes = min(BATCH_BYTES, max(0, max_message_size - m.DATA_OVERHEAD_MAX))
        #: The largest message the transport carries to a node unfragmented (None: unknown);
        #: the runtime plugs in Exon's. A BATCH stays within it, so that on a path with a
        #: small MTU a lost datagram holds back one BATCH's messages, not a 60 KB one's.
        self.unfragmented: Callable[[str], int | None] = lambda node_id: None
        #: Bytes the links' receive capacities may grow by, in all (docs/credits.md).
        self.credit_budget = CreditBudget(credit_budget_bytes)
        #: The transport's smoothed round trip to a node (None: not measured); the runtime
        #: plugs it in (:class:`a3m.core.transport.ExonBridge`). Links size their windows by it.
        self.rtt: Callable[[str], float | None] = lambda node_id: None
        #: Told of each link that comes up, ends, or is refused (the runtime's node events):
        #: ``fn(kind, tag, peer, reason)``, kind ``linked``, ``unlinked`` or ``link_refused``.
        #: Called on the node's I/O path: keep it cheap and never raise.
        self.link_event: Callable[[str, str, tuple[str, str], str], None] | None = None
        #: Takes a socket lent to a native exchange back before the core acts on it (the
        #: runtime's ``a3m.runtime.exchange``; a socket's ``lent`` says which are): the
        #: doors are :meth:`NodeCore.receive`, the timers and the peers and messages lost.
        self.take_back: Callable[[Any], None] | None = None

    def next_incarnation(self) -> int:
        self._inc += 1
        return self._inc

    def log(self, text: str) -> None:
        if self._log is not None:
            self._log(f"[{self.node_id}] {text}")

    def note_link(self, kind: str, tag: str, peer: tuple[str, str], reason: str) -> None:
        """Tell :attr:`link_event` (if set) that a link of socket ``tag`` changed."""
        fn = self.link_event
        if fn is not None:
            fn(kind, tag, peer, reason)

    def emit(self, node_id: str, data: bytes) -> None:
        """Queue a message for a node (ours: delivered locally, after the current one)."""
        if node_id == self.node_id:
            self._local.append(data)
        else:
            self._out.append((node_id, data))

    def cork(self, sock: Flushable, link: Link) -> None:
        """``link`` holds DATA to send (:attr:`Link.pending`): it leaves, as BATCHes, when the
        transport next takes the output."""
        self._corked.append((sock, link))

    def cork_taken(self, sock: Flushable, link: Link) -> None:
        """``link`` has outcomes to report (a TAKEN): they leave with the next output, so a
        reply that follows rides with them; :meth:`taken_waiting` tells the runtime, which
        takes the output by a short delay even if nothing else comes."""
        self._taken.append((sock, link))

    def taken_waiting(self) -> bool:
        return bool(self._taken)

    def has_output(self) -> bool:
        """Whether the output has something (or local messages wait to be routed)."""
        return bool(self._out or self._local or self._corked)
