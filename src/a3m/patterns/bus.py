"""BUS: every message goes to every linked peer once (synchronised: all need a credit);
messages are received from all peers fairly. Peers do not forward: link the mesh you need."""

from __future__ import annotations

from typing import Any

from mypy_extensions import mypyc_attr

from a3m.core.socket_core import SocketCore
from a3m.patterns.framing import send_to_all


@mypyc_attr(allow_interpreted_subclasses=True)
class Bus(SocketCore):
    kind = "BUS"
    peers = frozenset({"BUS"})

    def pattern_send(self, payload: bytes, **kw: Any) -> bool:
        return send_to_all(self, self.established_links(), payload)

    def pattern_can_send(self) -> bool:
        return all(lk.can_send for lk in self.established_links())
