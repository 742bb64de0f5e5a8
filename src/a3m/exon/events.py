"""Events an :class:`~a3m.exon.protocol.ExonProtocol` hands to its driver."""

from __future__ import annotations

from dataclasses import dataclass


class Event:
    """Marker base of every Exon event."""

    __slots__ = ()


class Delivered(Event):
    """A whole message from ``source`` was delivered (exactly once). Treat as immutable.

    A plain class, not a dataclass: one is made per message, and a compiled dataclass keeps
    the interpreted ``__init__`` that ``dataclasses`` generates (a Python call per message)."""

    __slots__ = ("source", "payload")

    def __init__(self, source: str, payload: bytes) -> None:
        self.source = source
        self.payload = payload

    def __eq__(self, other: object) -> bool:
        if type(other) is not Delivered:
            return NotImplemented
        return self.source == other.source and self.payload == other.payload

    __hash__ = None  # type: ignore[assignment]  # (as the dataclass: mutable, compared by value)

    def __repr__(self) -> str:
        return f"Delivered(source={self.source!r}, payload={self.payload!r})"


@dataclass(slots=True, eq=True)
class ReceiptReady(Event):
    """The destination acknowledged every piece of the message sent with this receipt."""

    receipt_id: int


@dataclass(slots=True, eq=True)
class Writable(Event):
    """A window that made ``send`` raise :class:`~a3m.errors.WouldBlock` has room again."""


@dataclass(slots=True, eq=True)
class OutcomeUnknown(Event):
    """A message to ``destination`` whose fate cannot be known: the destination node restarted
    without a graceful close (a crash) while the message was bound to a slot of its earlier
    incarnation, so that incarnation may have delivered it (its ACK lost) or not.

    It was delivered at most once, maybe never; Exon does not send it again (that could
    duplicate it) and no :class:`ReceiptReady` follows for ``receipt_id``. The application
    decides (send it again if it is idempotent, report it, ...). Treat as immutable.
    """

    destination: str
    payload: bytes
    receipt_id: int | None


@dataclass(slots=True, eq=True)
class NotDelivered(Event):
    """A message to ``destination`` given up by :meth:`ExonProtocol.abandon
    <a3m.exon.protocol.ExonProtocol.abandon>` before all of it ever left this node (queued
    without a slot, or a fragmented message some of whose fragments were never sent): the
    destination cannot have delivered it, and Exon will not send it. Sending it again cannot
    duplicate it. No :class:`ReceiptReady` follows for ``receipt_id``. Treat as immutable.
    """

    destination: str
    payload: bytes
    receipt_id: int | None


@dataclass(slots=True, eq=True)
class PeerUnreachable(Event):
    """Node ``peer`` holds messages of ours unacknowledged (or our messages wait for its slots)
    and nothing at all was heard from it for ``silent_s`` seconds (at least
    ``ExonConfig.peer_timeout_s``): it crashed, or the path to it is cut. A *signal* only:
    Exon keeps retransmitting, and delivers exactly once if the peer answers again (then
    :class:`PeerReachable` follows). The layer above may give up on it with
    :meth:`ExonProtocol.abandon <a3m.exon.protocol.ExonProtocol.abandon>`."""

    peer: str
    silent_s: float


@dataclass(slots=True, eq=True)
class PeerReachable(Event):
    """A peer reported :class:`PeerUnreachable` (and not abandoned since) was heard again."""

    peer: str


@dataclass(slots=True, eq=True)
class PeerRestarted(Event):
    """Node ``peer`` came back as a new incarnation: its handshake names another incarnation
    than the session it replaces (secure associations only). Nothing of its earlier state
    (links, queues) survives there; what Exon still held for the old one follows the restart
    rules (VOID, :class:`OutcomeUnknown`)."""

    peer: str


@dataclass(slots=True, eq=True)
class KeyRefused(Event):
    """A handshake as ``peer`` was refused: ``key`` is not the key pinned for it, or not the one
    it was first seen with (trust on first use), or it is unknown in strict trust mode. Nothing
    from that key reaches the node (``docs/exon-wire.md``, "Secure associations")."""

    peer: str
    key: bytes
