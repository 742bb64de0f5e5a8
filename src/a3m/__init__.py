"""A3M: brokerless messaging with exactly-once delivery over UDP.

The flat public API (SPEC section 7). Layers, bottom to top: :mod:`a3m.exon` (the
transport), :mod:`a3m.core` (links, credits, sockets), :mod:`a3m.patterns` (socket kinds),
then the runtimes and integrations.
"""

from __future__ import annotations

from a3m.errors import (
    A3MError,
    Broken,
    Closed,
    LinkError,
    LinkRefused,
    MessageTooLarge,
    ProtocolViolation,
    SocketNotFound,
    SocketNotLinked,
    Timeout,
    UsageError,
    WouldBlock,
)

__version__ = "0.1.0"

# Socket kinds (SPEC 7): names understood by Node.socket().
PAIR = "PAIR"
REQ = "REQ"
REP = "REP"
PUSH = "PUSH"
PULL = "PULL"
PUB = "PUB"
SUB = "SUB"
XPUB = "XPUB"  # a PUB whose recv() says which topics its subscribers want (forwarders)
XSUB = "XSUB"  # a SUB whose send() subscribes (forwarders)
DEALER = "DEALER"
ROUTER = "ROUTER"
SURVEYOR = "SURVEYOR"
RESPONDENT = "RESPONDENT"
BUS = "BUS"

POLLIN = 1
POLLOUT = 2

_LAZY = {"Node": "a3m.runtime.node", "Socket": "a3m.runtime.node",
         "Poller": "a3m.runtime.node", "SocketId": "a3m.runtime.node",
         "ReceivedMessage": "a3m.runtime.node", "proxy": "a3m.runtime.proxy"}


def __getattr__(name: str) -> object:
    # The runtime (threads, sockets) loads on first use, so the sans-I/O layers stay light.
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'a3m' has no attribute {name!r}")


__all__ = [
    "BUS", "DEALER", "PAIR", "POLLIN", "POLLOUT", "PUB", "PULL", "PUSH", "REP", "REQ",
    "RESPONDENT", "ROUTER", "SUB", "SURVEYOR", "XPUB", "XSUB",
    "Node", "Poller", "ReceivedMessage", "Socket", "SocketId", "proxy",
    "A3MError",
    "Broken",
    "Closed",
    "LinkError",
    "LinkRefused",
    "MessageTooLarge",
    "ProtocolViolation",
    "SocketNotFound",
    "SocketNotLinked",
    "Timeout",
    "UsageError",
    "WouldBlock",
    "__version__",
]
