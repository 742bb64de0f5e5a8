"""The global name of a socket, shared by every layer (a plain tuple underneath)."""

from __future__ import annotations

from typing import Any, NamedTuple

from a3m.errors import UsageError


class SocketId(NamedTuple):
    """A socket's global name: the node id and the socket's tag on that node. ``str()``
    gives ``node/tag``, the form every call that names a peer accepts; the repr stays
    ``SocketId(node=..., tag=...)``."""

    node: str
    tag: str

    def __str__(self) -> str:
        return f"{self.node}/{self.tag}"

    @classmethod
    def of(cls, peer: Any) -> SocketId:
        """Accept a SocketId, a ``(node, tag)`` pair or ``"node/tag"``."""
        if isinstance(peer, SocketId):
            return peer
        if isinstance(peer, tuple) and len(peer) == 2:
            return cls(str(peer[0]), str(peer[1]))
        if isinstance(peer, str) and "/" in peer:
            node, tag = peer.rsplit("/", 1)
            return cls(node, tag)
        raise UsageError(f"a peer socket is SocketId(node, tag), (node, tag) or 'node/tag': "
                         f"{peer!r}")
