"""DEALER / ROUTER: asynchronous request/reply with routing ids.

A ROUTER receives each message with its routing id, the sender's socket id (``recv_msg().source``)
and sends with ``send(data, to=peer)``: a message for an unknown route raises
:class:`~a3m.errors.SocketNotLinked` in the sender, never a silent drop. A DEALER spreads its
messages round robin over its links and receives from all of them fairly.
"""

from __future__ import annotations

from typing import Any

from mypy_extensions import mypyc_attr

from a3m.core.socket_core import SocketCore
from a3m.errors import SocketNotLinked, UsageError


@mypyc_attr(allow_interpreted_subclasses=True)
class Dealer(SocketCore):
    kind = "DEALER"
    peers = frozenset({"ROUTER", "DEALER"})


@mypyc_attr(allow_interpreted_subclasses=True)
class Router(SocketCore):
    send_keywords = frozenset({"to"})
    kind = "ROUTER"
    peers = frozenset({"DEALER", "ROUTER"})

    def pattern_send(self, payload: bytes, to: Any = None, **kw: Any) -> bool:
        if to is None:
            raise UsageError("ROUTER.send needs to=<routing id> (a peer SocketId)")
        if isinstance(to, tuple) and len(to) == 2:
            peer = (str(to[0]), str(to[1]))
        elif isinstance(to, str) and "/" in to:
            node, tag = to.rsplit("/", 1)
            peer = (node, tag)
        else:
            raise UsageError(f"ROUTER: a routing id is a SocketId, (node, tag) or 'node/tag', "
                             f"not {to!r}")
        link = self.links.get(peer)
        if link is None or not link.established:
            raise SocketNotLinked(f"ROUTER: no route to {to!r}")
        if not link.can_send:
            return False
        self.send_on(link, payload)
        return True
