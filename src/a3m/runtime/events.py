"""A node's events (SPEC 7): what happens to its links and peers, in the manner of pyzmq's
socket monitor and pynng's pipe callbacks.

:class:`NodeEvent` is what ``Node.events()`` yields (``async for`` in :mod:`a3m.aio`); each
one is also a log line on the ``a3m.events`` logger (under ``a3m``): WARNING for a restart
that left messages of unknown outcome and for a refused key, INFO for the rest. The node
keeps the last :data:`EVENTS_KEPT` events not yet read (older ones are dropped and counted in
``Node.stats["events_dropped"]``), so a node nobody asks holds a bounded few.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from dataclasses import dataclass, field

from a3m.ids import SocketId

log = logging.getLogger("a3m.events")

#: The kinds of :class:`NodeEvent`.
LINKED = "linked"
UNLINKED = "unlinked"
LINK_REFUSED = "link_refused"
PEER_UNREACHABLE = "peer_unreachable"
PEER_REACHABLE = "peer_reachable"
PEER_RESTARTED = "peer_restarted"
KEY_REFUSED = "key_refused"
HANDSHAKE_REFUSED = "handshake_refused"
KINDS = (LINKED, UNLINKED, LINK_REFUSED, PEER_UNREACHABLE, PEER_REACHABLE, PEER_RESTARTED,
         KEY_REFUSED, HANDSHAKE_REFUSED)

#: Events kept for the application to read; beyond it the oldest go (counted).
EVENTS_KEPT = 4096
#: Handshakes refused under load are told at most this often (one event with the counts).
HANDSHAKE_REFUSED_EVERY_S = 1.0

_NOBODY = SocketId("", "")


@dataclass(frozen=True, slots=True)
class NodeEvent:
    """Something that happened to a node's links or peers.

    ``kind``: ``linked`` (a link came up), ``unlinked`` (it ended: ``reason`` says how),
    ``link_refused`` (a link was refused, by the peer or here, and why; non-fatal refusals
    are retried and told again), ``peer_unreachable`` (a peer node silent for
    ``peer_timeout_s`` while holding messages of ours: its links end), ``peer_reachable``
    (heard again), ``peer_restarted`` (a new incarnation of a peer answered: its links end,
    this side's relink), ``key_refused`` (a handshake as ``peer`` with a key not pinned for
    it, or not the one first seen), ``handshake_refused`` (this node shed handshakes under
    load: ``reason`` has the counts; at most one such event a second).

    ``peer``: the peer socket (:class:`~a3m.SocketId`) for link events, ``SocketId(node,
    "")`` for events about a node, ``SocketId("", "")`` when no peer is known.
    ``socket``: this node's socket for link events, else None. ``unknown``: for
    ``peer_restarted`` and ``peer_unreachable``, how many messages sent with a cookie it left
    of unknown outcome (those cookies say UNKNOWN; messages sent without one are not counted
    one by one). ``time``: when it happened (``time.time()``).
    """

    kind: str
    peer: SocketId
    socket: SocketId | None = None
    unknown: int = 0
    reason: str = ""
    time: float = field(default_factory=time.time)

    def __str__(self) -> str:
        text = self.kind
        if self.socket is not None:
            text += f" {self.socket} <-> {self.peer}"
        elif self.peer.node:
            text += f" {self.peer.node}"
        if self.kind in (PEER_RESTARTED, PEER_UNREACHABLE):
            text += f" ({self.unknown} message(s) of unknown outcome)"
        if self.reason:
            text += f": {self.reason}"
        return text


class EventQueue:
    """The events a node keeps until the application reads them (under the node's lock)."""

    __slots__ = ("node_id", "items", "dropped", "told")

    def __init__(self, node_id: str) -> None:
        self.node_id = node_id
        self.items: deque[NodeEvent] = deque()
        self.dropped = 0
        self.told: dict[str, int] = dict.fromkeys(KINDS, 0)  # events by kind, since the start

    def add(self, ev: NodeEvent) -> None:
        """Keep ``ev`` for the application and log it."""
        items = self.items
        if len(items) >= EVENTS_KEPT:
            items.popleft()
            self.dropped += 1
        items.append(ev)
        self.told[ev.kind] = self.told.get(ev.kind, 0) + 1
        warn = (ev.kind == PEER_RESTARTED and ev.unknown > 0) or ev.kind == KEY_REFUSED
        log.log(logging.WARNING if warn else logging.INFO, "node %r: %s", self.node_id, ev)

    def pop(self) -> NodeEvent | None:
        return self.items.popleft() if self.items else None


__all__ = ["NodeEvent", "EventQueue", "KINDS", "EVENTS_KEPT", "LINKED", "UNLINKED",
           "LINK_REFUSED", "PEER_UNREACHABLE", "PEER_REACHABLE", "PEER_RESTARTED",
           "KEY_REFUSED", "HANDSHAKE_REFUSED"]
