"""Socket patterns, each built only on the public extension points of
:class:`a3m.core.socket_core.SocketCore` (the same ones a user's custom socket kind uses)."""

from __future__ import annotations

from a3m.core.socket_core import SocketCore
from a3m.patterns.pair import Pair
from a3m.patterns.pipeline import Pull, Push

BUILTIN: dict[str, type[SocketCore]] = {
    "PAIR": Pair,
    "PUSH": Push,
    "PULL": Pull,
}

__all__ = ["BUILTIN", "Pair", "Pull", "Push"]
