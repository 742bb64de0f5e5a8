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
