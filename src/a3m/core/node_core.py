"""The node as a container of sockets, without I/O: tags, routing, errors, local delivery.

What its sockets see of it (output, time, limits) is :class:`~a3m.core.node_base.NodeBase`."""

from __future__ import annotations

from collections.abc import Callable
from random import Random
from typing import Any, cast

from a3m.core import message as m
from a3m.core.cookies import SEQ_MASK
from a3m.core.node_base import BATCH_BYTES, DeliveryObserver, NodeBase
from a3m.core.socket_core import SocketCore
from a3m.errors import ProtocolViolation, UsageError

SocketFactory = Callable[..., SocketCore]
#: Nodes learnt from traffic stop being added past this many known nodes (a flood of made-up
#: ids must not grow the set, nor the links of a RADIO, without bound).
MAX_LEARNT_NODES = 4096


class NodeCore(NodeBase):
    """Routes middleware messages between the transport and the node's sockets.

    Feed it what the transport delivered (:meth:`receive`); take what it wants sent
    (:meth:`take_output`, a list of ``(node_id, bytes)``). Messages between two sockets of this
    node never reach the transport (seed 001).
    """

    def __init__(self, node_id: str, rng: Random | None = None,
                 log: Callable[[str], None] | None = None,
                 max_message_size: int = 1 << 62,
                 credit_budget_bytes: int = 64 * 1024 * 1024) -> None:
        super().__init__(node_id, rng, log, max_message_size, credit_budget_bytes)
        self.sockets: dict[str, SocketCore] = {}
        self.types: dict[str, SocketFactory] = {}
        self.malformed = 0
        self.not_found = 0
        self._auto_tag = 0
        self._draining = False
        self.lost_messages = 0  # messages of unknown outcome reported by the transport
        #: Nodes this node knows of (associated, discovered, or heard from); see
        #: :meth:`node_known` and :meth:`watch_nodes`.
        self.known_nodes: set[str] = set()
        self._node_watchers: list[Callable[[str], None]] = []

    # ------------------------------------------------------------------ registry

    def register_type(self, name: str, factory: SocketFactory) -> None:
        """Register a socket kind by name; ``factory(node_core, tag, rng, **options)``."""
        self.types[name.upper()] = factory

    def create(self, kind: str | SocketFactory, tag: str | None = None,
               **options: Any) -> SocketCore:
        factory = self.types.get(kind.upper()) if isinstance(kind, str) else kind
        if factory is None:
            raise UsageError(f"unknown socket kind {kind!r}")
        if tag is None:
            self._auto_tag += 1
            tag = f"s{self._auto_tag}"
        if tag in self.sockets:
            raise UsageError(f"tag {tag!r} is already used on node {self.node_id!r}")
        m.encoded_tag(tag)
        sock = factory(self, tag, Random(self.rng.random()), **options)
        self.sockets[tag] = sock
        return sock

    def remove(self, tag: str) -> None:
        self.sockets.pop(tag, None)

    # ------------------------------------------------------------------ known nodes

    def node_known(self, node_id: str) -> None:
        """Learn of a node (the runtime calls this for associations and discovery entries;
        a node that sends us anything is learnt too). Watchers hear of each node once."""
        if node_id in self.known_nodes or node_id == self.node_id:
            return
        self.known_nodes.add(node_id)
        for fn in list(self._node_watchers):
            fn(node_id)

    def watch_nodes(self, fn: Callable[[str], None]) -> None:
        """Call ``fn(node_id)`` for this node, every node known now and each node learnt
        later: the extension point for sockets that reach peers without ``link()`` (RADIO)."""
        self._node_watchers.append(fn)
        for node_id in [self.node_id, *sorted(self.known_nodes)]:
            fn(node_id)

    @property
    def nodes_watched(self) -> bool:
        """Whether a socket watches for nodes (the runtime then lists its discovery source)."""
        return bool(self._node_watchers)

    def unwatch_nodes(self, fn: Callable[[str], None]) -> None:
        if fn in self._node_watchers:
            self._node_watchers.remove(fn)

    # ------------------------------------------------------------------ traffic

    def take_output(self) -> list[tuple[str, bytes]]:
        if self._corked:
            corked, self._corked = self._corked, []
            for sock, link in corked:
                cast(SocketCore, sock).flush_link(link)
        if self._taken:
            taken, self._taken = self._taken, []
            for sock, link in taken:
                cast(SocketCore, sock).flush_taken(link)
        self._drain_local()
        out, self._out = self._out, []
        return out

    def receive(self, src_node: str, data: bytes, now: float) -> None:
        """A message the transport delivered from ``src_node`` (never raises on bad input)."""
        self.now = now
        self._dispatch(src_node, data)
        self._drain_local()

    def _drain_local(self) -> None:
        if self._draining:
            return
        self._draining = True
        try:
            while self._local:
                self._dispatch(self.node_id, self._local.popleft())
        finally:
            self._draining = False

    def _dispatch(self, src_node: str, data: bytes) -> None:
        if len(data) > 8 and data[3] in m.SEQUENCED:
            try:
                t, src_tag, dst_tag, src_inc, dst_inc, seq, payload = m.DECODE_SEQUENCED(data)
            except ProtocolViolation as exc:
                self.malformed += 1
                self.log(f"dropped a malformed message from {src_node}: {exc}")
                return
            sock = self.sockets.get(dst_tag)
            if sock is not None:
                if sock.lent:
                    sock.take_back()
                if sock.on_sequenced_fast(src_node, src_tag, t, src_inc, dst_inc, seq,
                                          payload):
                    return
        try:
            msg = m.decode(data)
        except ProtocolViolation as exc:
            self.malformed += 1
            self.log(f"dropped a malformed message from {src_node}: {exc}")
            return
        if src_node not in self.known_nodes and src_node != self.node_id \
                and len(self.known_nodes) < MAX_LEARNT_NODES:
            self.node_known(src_node)
        sock = self.sockets.get(msg.dst_tag)
        if sock is not None and sock.lent:
            sock.take_back()
        if sock is None:
            self.not_found += 1
            if msg.type != m.ERROR:  # never an ERROR in answer to an ERROR
                self.emit(src_node, m.encode(m.Message(
                    m.ERROR, msg.dst_tag, msg.src_tag, 0, msg.src_inc,
                    code=m.ERR_SOCKET_NOT_FOUND, about=msg.type)))
            return
        sock.handle(src_node, msg, self.now)

    # ------------------------------------------------------------------ lost peers

    def message_lost(self, node_id: str, data: bytes, now: float,
                     surely_not: bool = False, reason: str = "") -> None:
        """The transport cannot tell whether ``data``, sent to ``node_id``, was delivered
        (that node crashed with it in flight; ``surely_not``: it was given up before it
        wholly left): the link it belongs to ends (see :meth:`SocketCore.link_lost`)."""
        self.now = now
        try:
            msg = m.decode(data)
        except ProtocolViolation:
            return
        sock = self.sockets.get(msg.src_tag)
        if sock is not None and sock.lent:
            sock.take_back()
        if sock is not None and msg.src_inc:
            never: list[int] | None = None
            if surely_not and msg.type in (m.DATA, m.BATCH):
                first = msg.seq & SEQ_MASK
                count = 1
                if msg.type == m.BATCH:
                    try:
                        count = len(m.split_batch(msg.payload))
                    except ProtocolViolation:
                        count = 0
                never = list(range(first, first + count))
            sock.link_lost((node_id, msg.dst_tag), msg.src_inc, never, reason)
        self.lost_messages += 1

    def peer_lost(self, node_id: str, now: float, reason: str = "peer lost") -> int:
        """``node_id`` stopped answering, or restarted: every link to it ends
        (:meth:`SocketCore.peer_lost`). Returns how many messages sent with a cookie this
        left of unknown outcome (their cookies say UNKNOWN)."""
        self.now = now
        before = self.unknown_outcomes()
        for sock in list(self.sockets.values()):
            if sock.lent:
                sock.take_back()
            sock.peer_lost(node_id, reason)
        return self.unknown_outcomes() - before

    def unknown_outcomes(self) -> int:
        """How many outcomes this node's sockets gave UNKNOWN so far (closed sockets'
        excepted)."""
        return sum(s.jar.unknown_given for s in self.sockets.values())

    # ------------------------------------------------------------------ timers

    def next_timer(self) -> float | None:
        # (a loop, not min() of a list: this runs a few times a round trip, and the list
        # and its boxed times were allocations each)
        first: float | None = None
        for sock in self.sockets.values():
            t = sock.next_timer()
            if t is not None and (first is None or t < first):
                first = t
        return first

    def handle_timer(self, now: float) -> None:
        self.now = now
        for sock in list(self.sockets.values()):
            if sock.lent:
                t = sock.next_timer()
                if t is None or t > now:
                    continue  # (nothing of its is due: it stays lent)
                sock.take_back()
            sock.handle_timer(now)
        self._drain_local()



__all__ = ["NodeCore", "NodeBase", "DeliveryObserver", "BATCH_BYTES", "SocketFactory",
           "MAX_LEARNT_NODES"]
