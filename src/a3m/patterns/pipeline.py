"""PUSH / PULL (pipeline): PUSH spreads messages round robin over the links that hold credits;
PULL receives from all its links fairly. Built only on the core's extension points."""

from __future__ import annotations

from mypy_extensions import mypyc_attr

from a3m.core.socket_core import SocketCore


@mypyc_attr(allow_interpreted_subclasses=True)
class Push(SocketCore):
    kind = "PUSH"
    peers = frozenset({"PULL"})
    sends = True
    receives = False


@mypyc_attr(allow_interpreted_subclasses=True)
class Pull(SocketCore):
    kind = "PULL"
    peers = frozenset({"PUSH"})
    sends = False
    receives = True
