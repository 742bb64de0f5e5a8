"""Events an :class:`~a3m.exon.protocol.ExonProtocol` hands to its driver."""

from __future__ import annotations

from dataclasses import dataclass


class Event:
    """Marker base of every Exon event."""

    __slots__ = ()


@dataclass(slots=True, eq=True)
class Delivered(Event):
    """A whole message from ``source`` was delivered (exactly once). Treat as immutable."""

    source: str
    payload: bytes


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
