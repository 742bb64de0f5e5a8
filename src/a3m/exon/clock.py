"""The node clock ``ck`` and where it is kept across restarts.

The clock is the one lasting integer of an Exon node: every receive record's incarnation and
every send record's first slot come from it, so it must never go back, not even across a
crash. The protocol reserves values ahead of use (:meth:`ClockStore.reserve` must be durable
before it returns) and a restarted node starts from the reserved mark (:meth:`ClockStore.load`).
"""

from __future__ import annotations

from typing import Protocol


class ClockStore(Protocol):
    """Where a node's clock high-water mark lives."""

    def load(self) -> int:
        """The value a (re)starting node may begin at: at least every value ever reserved."""
        ...

    def reserve(self, upto: int) -> None:
        """Make ``upto`` durable as the new high-water mark before returning."""
        ...


class MemoryClockStore:
    """A clock store in memory: restart-safe while the same object is reused (simulation)."""

    def __init__(self, start: int = 0) -> None:
        self.mark = start
        self.writes = 0

    def load(self) -> int:
        return self.mark

    def reserve(self, upto: int) -> None:
        if upto > self.mark:
            self.mark = upto
            self.writes += 1


class NodeClock:
    """The clock as the protocol sees it: reads are free, reservations go to the store."""

    __slots__ = ("value", "_reserved", "_store", "_block")

    def __init__(self, store: ClockStore, block: int) -> None:
        self._store = store
        self._block = block
        self.value = store.load()
        self._reserved = self.value
        store.reserve(self.value + block)
        self._reserved = self.value + block

    @property
    def reserved(self) -> int:
        """The durable high-water mark; no value above it is ever used."""
        return self._reserved

    def cover(self, upto: int) -> None:
        """Make sure ``upto`` is durably reserved (called before any value up to it is used)."""
        if upto > self._reserved:
            mark = upto + self._block
            self._store.reserve(mark)
            self._reserved = mark

    def advance_to(self, value: int) -> None:
        """``ck = max(ck, value)``, reserving first."""
        if value > self.value:
            self.cover(value)
            self.value = value

    def take(self) -> int:
        """Return ``ck`` and increment it (a new receive record's incarnation)."""
        v = self.value
        self.cover(v + 1)
        self.value = v + 1
        return v
