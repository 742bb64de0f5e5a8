"""Which long-term key may speak as which node id: pins, trust on first use, strict mode."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable

from a3m.errors import UsageError

#: Keys learnt on first use that are remembered (the oldest is forgotten beyond it).
MAX_LEARNT = 65536
MODES = ("tofu", "strict")


class TrustStore:
    """Pinned keys always win; without a pin, ``"tofu"`` binds a node id to the first key that
    completes a handshake as it (for this node's lifetime) and ``"strict"`` refuses it."""

    def __init__(self, mode: str = "tofu",
                 lookup: Callable[[str], bytes | None] | None = None) -> None:
        if mode not in MODES:
            raise UsageError(f"trust must be one of {', '.join(MODES)}, not {mode!r}")
        self.mode = mode
        self._lookup = lookup  # a discovery source's keys: pins
        self.pins: dict[str, bytes] = {}
        self.learnt: OrderedDict[str, bytes] = OrderedDict()

    def pin(self, peer: str, public: bytes) -> None:
        """Only ``public`` may speak as ``peer`` from now on."""
        self.pins[peer] = public
        self.learnt.pop(peer, None)

    def pinned(self, peer: str) -> bytes | None:
        """The key pinned for ``peer`` (by hand, or by the discovery source)."""
        key = self.pins.get(peer)
        if key is None and self._lookup is not None:
            key = self._lookup(peer)
        return key

    def key_of(self, peer: str) -> bytes | None:
        """The key ``peer`` is pinned to or was learnt with (None: none yet)."""
        return self.pinned(peer) or self.learnt.get(peer)

    def admits(self, peer: str, public: bytes) -> bool:
        """Whether ``public`` may speak as ``peer``; trust on first use records it."""
        pinned = self.pinned(peer)
        if pinned is not None:
            return pinned == public
        if self.mode == "strict":
            return False
        known = self.learnt.get(peer)
        if known is None:
            self.learnt[peer] = public
            if len(self.learnt) > MAX_LEARNT:
                self.learnt.popitem(last=False)
            return True
        return known == public
