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

__all__ = [
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
