"""The Exon transport: exactly-once delivery of byte payloads between nodes over UDP.

The protocol is a sans-I/O state machine (:class:`ExonProtocol`); :class:`Endpoint` drives it
over a real UDP socket (imported lazily from :mod:`a3m.runtime`, the one upward reference).
"""

from __future__ import annotations

from typing import Any

from a3m.exon.clock import ClockStore, MemoryClockStore
from a3m.exon.config import ExonConfig
from a3m.exon.discovery import StaticDiscovery
from a3m.exon.events import (
    Delivered,
    Event,
    NotDelivered,
    OutcomeUnknown,
    PeerReachable,
    PeerRestarted,
    PeerUnreachable,
    ReceiptReady,
    Writable,
)
from a3m.exon.protocol import ExonProtocol, ExonStats

__all__ = [
    "ClockStore", "Delivered", "Endpoint", "Event", "ExonConfig", "ExonProtocol", "ExonStats",
    "MemoryClockStore", "NotDelivered", "OutcomeUnknown", "PeerReachable", "PeerRestarted",
    "PeerUnreachable",
    "ReceiptReady", "StaticDiscovery", "Writable",
]


def __getattr__(name: str) -> Any:
    if name == "Endpoint":
        import importlib

        return importlib.import_module("a3m.runtime.endpoint").Endpoint
    raise AttributeError(f"module 'a3m.exon' has no attribute {name!r}")
