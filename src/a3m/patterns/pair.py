"""PAIR: exactly one peer. A second link is refused (non-fatal: retried once the first one
closes); both sides send and receive."""

from __future__ import annotations

from mypy_extensions import mypyc_attr

from a3m.core.socket_core import SocketCore


@mypyc_attr(allow_interpreted_subclasses=True)
class Pair(SocketCore):
    kind = "PAIR"
    peers = frozenset({"PAIR"})
    pattern_max_links = 1
