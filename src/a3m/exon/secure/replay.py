"""The replay window's state: 64-bit packet counters, RFC 6479's idea with a Python int as
the bitmap. The check and the update are inlined in ``SecureLayer.open`` (the hot path):
checked before the tag is verified, recorded after."""

from __future__ import annotations

#: Counters this far below the highest seen are refused as too old.
WINDOW = 4096


class ReplayWindow:
    """``top``: the highest counter accepted; bit ``i`` of ``bits``: counter ``top - i``
    accepted."""

    __slots__ = ("top", "bits")

    def __init__(self) -> None:
        self.top = -1
        self.bits = 0
