"""The replay window: 64-bit packet counters, RFC 6479's bitmap as a ring of bytes
(WireGuard's layout, with 8-bit words). Checked before the tag is verified
(:meth:`ReplayWindow.fresh`), recorded after (:meth:`ReplayWindow.accept`). A counter one
above the highest, the common case, sets one bit of one byte; the ring's bytes are cleared as
the highest counter moves past them. (A Python int as the whole bitmap, shifted to the
highest counter, cost three operations on a 4096-bit number per datagram, 0.3-0.4 us here.)"""

from __future__ import annotations

from typing import Final, Protocol

from a3m._dataplane import native

#: Counters this far below the highest seen are refused as too old.
WINDOW: Final = 4096
#: Bytes in the ring: the window and the partly filled byte of the highest counter.
_BYTES: Final = WINDOW // 8 + 1


class ReplayWindow:
    """``top``: the highest counter accepted; bit ``c % 8`` of byte ``(c // 8) % _BYTES`` of
    ``ring``: counter ``c`` accepted (for ``c`` within ``WINDOW`` below ``top``)."""

    __slots__ = ("top", "ring")

    def __init__(self) -> None:
        self.top = -1
        self.ring = bytearray(_BYTES)

    def fresh(self, counter: int) -> bool:
        """Whether ``counter`` was never accepted and is not too old."""
        top = self.top
        if counter > top:
            return True
        if top - counter >= WINDOW:
            return False
        return not (self.ring[(counter >> 3) % _BYTES] >> (counter & 7)) & 1

    def accept(self, counter: int) -> None:
        """Record ``counter`` (checked by :meth:`fresh`, its datagram authenticated)."""
        ring = self.ring
        top = self.top
        i = (counter >> 3) % _BYTES
        if counter > top:
            w = counter >> 3
            last = top >> 3
            if w != last:
                # The bytes the highest counter moves into held counters a ring's length
                # older, all below the window now: clear them.
                for j in range(max(last + 1, w - _BYTES + 1), w + 1):
                    ring[j % _BYTES] = 0
            self.top = counter
        ring[i] |= 1 << (counter & 7)


class Replay(Protocol):
    """What a session needs of its replay window (this module's, or the native twin)."""

    @property
    def top(self) -> int: ...

    def fresh(self, counter: int) -> bool: ...

    def accept(self, counter: int) -> None: ...


def new_replay_window() -> Replay:
    """The window that runs: ``a3m._native.ReplayWindow`` where ``a3m.NATIVE`` (the native
    engine then checks and records a live session's counters without a Python call), else
    :class:`ReplayWindow`."""
    if native is not None:
        w: Replay = native.ReplayWindow()
        return w
    return ReplayWindow()
