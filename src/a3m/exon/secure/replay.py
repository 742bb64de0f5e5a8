"""A sliding replay window over 64-bit packet counters (RFC 6479's idea, as a Python int)."""

from __future__ import annotations

#: Counters this far below the highest seen are refused as too old.
WINDOW = 4096
_MASK = (1 << WINDOW) - 1


class ReplayWindow:
    """Accepts each counter once. :meth:`fresh` checks without changing anything (before the
    packet is authenticated); :meth:`mark` records it (after)."""

    __slots__ = ("top", "bits")

    def __init__(self) -> None:
        self.top = -1  # highest counter accepted
        self.bits = 0  # bit i: counter top - i accepted

    def fresh(self, counter: int) -> bool:
        top = self.top
        if counter > top:
            return True
        off = top - counter
        return off < WINDOW and not (self.bits >> off) & 1

    def mark(self, counter: int) -> bool:
        """Record ``counter``; returns whether it is the highest so far."""
        top = self.top
        if counter > top:
            self.bits = ((self.bits << (counter - top)) | 1) & _MASK
            self.top = counter
            return True
        self.bits |= 1 << (top - counter)
        return False
