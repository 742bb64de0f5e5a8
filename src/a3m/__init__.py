"""A3M: brokerless messaging with exactly-once delivery over UDP.

The flat public API (SPEC section 7). Layers, bottom to top: :mod:`a3m.exon` (the
transport), :mod:`a3m.core` (links, credits, sockets), :mod:`a3m.patterns` (socket kinds),
then the runtimes and integrations.
"""

from __future__ import annotations

import os as _os

from a3m import _compiled

#: True when the sans-I/O cores run compiled by mypyc; False: their Python sources
#: (``A3M_PURE_PYTHON=1``, no C compiler at install, or sources edited since the build).
COMPILED = _compiled.activate(_os.path.dirname(_os.path.dirname(_os.path.abspath(__file__))))

from a3m._dataplane import native as _native_module  # noqa: E402

#: True when the native data plane (``a3m._native``, Rust) runs; False: its Python twins
#: (``A3M_NATIVE=0``, ``A3M_PURE_PYTHON=1``, no Rust toolchain at install, or a Rust source
#: edited since the build). ``docs/design.md``, "The native data plane".
NATIVE = _native_module is not None

from a3m.errors import (  # noqa: E402
    A3MError,
    Broken,
    Closed,
    LinkError,
    LinkRefused,
    MessageTooLarge,
    NoMembers,
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
RADIO = "RADIO"  # sends to named groups of DISH sockets it finds by itself
DISH = "DISH"  # joins groups: join("sensors"), recv_msg().group

# Group delivery strategies (RADIO): every member of the view, or exactly one of them.
ALL = "ALL"
ONE = "ONE"

POLLIN = 1
POLLOUT = 2
POLLCOOKIE = 4

# What became of a message sent with a cookie (a3m.Cookie.outcome): the peer socket's
# application took it; the peer's node ended after it may have taken it; it never will be.
from a3m.core.cookies import DELIVERED, NOT_DELIVERED, UNKNOWN  # noqa: E402

_LAZY = {"Node": "a3m.runtime.node", "Socket": "a3m.runtime.sockets",
         "Poller": "a3m.runtime.sockets", "SocketId": "a3m.ids",
         "ReceivedMessage": "a3m.runtime.sockets", "Cookie": "a3m.core.cookies",
         "NodeEvent": "a3m.runtime.events", "proxy": "a3m.runtime.proxy"}


def __getattr__(name: str) -> object:
    # The runtime (threads, sockets) loads on first use, so the sans-I/O layers stay light.
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'a3m' has no attribute {name!r}")


__all__ = [
    "ALL", "BUS", "Cookie", "DELIVERED", "NOT_DELIVERED", "POLLCOOKIE", "UNKNOWN", "DEALER", "DISH", "ONE", "PAIR", "POLLIN", "POLLOUT", "PUB", "PULL", "PUSH",
    "RADIO", "REP", "REQ", "RESPONDENT", "ROUTER", "SUB", "SURVEYOR", "XPUB", "XSUB",
    "Node", "NodeEvent", "Poller", "ReceivedMessage", "Socket", "SocketId", "proxy",
    "A3MError",
    "Broken",
    "Closed",
    "LinkError",
    "LinkRefused",
    "MessageTooLarge",
    "NoMembers",
    "ProtocolViolation",
    "SocketNotFound",
    "SocketNotLinked",
    "Timeout",
    "UsageError",
    "WouldBlock",
    "__version__",
]
