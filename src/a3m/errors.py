"""The A3M error family.

Every error raised by a3m derives from :class:`A3MError`. The split follows h11 and trio:
a caller's misuse raises at once; a peer's misbehaviour never escapes the I/O loop (it is
counted, or turns into a link close) and reaches the caller only as the cause of a later
failure.
"""

from __future__ import annotations


class A3MError(Exception):
    """Base class of every a3m error."""


class Timeout(A3MError, TimeoutError):
    """A blocking call's timeout passed before it could complete."""


class WouldBlock(A3MError):
    """A non-blocking call could not complete at once (a window or queue is full or empty)."""


class Closed(A3MError):
    """The object (node, endpoint, socket) was closed by its owner."""


class UsageError(A3MError, ValueError):
    """The caller misused the API: a bad argument, or an operation the state forbids."""


class ProtocolViolation(A3MError):
    """A peer sent something the protocol forbids. Raised only by codecs; the runtime turns
    it into a counted drop or a link close, never into an exception in the I/O loop."""


class MessageTooLarge(UsageError):
    """The payload exceeds the configured maximum message size."""


class Broken(A3MError):
    """Something outside the caller's control ended the operation (the cause is chained)."""


class LinkError(A3MError):
    """A link could not be established or was closed while an operation depended on it."""


class SocketNotFound(LinkError):
    """The peer node has no socket with that tag."""


class SocketNotLinked(LinkError):
    """The peer socket is not linked with this one."""


class LinkRefused(LinkError):
    """The peer refused the link with a fatal reason (incompatible type, closed, ...)."""


class NoMembers(A3MError):
    """A RADIO sent to a group that has no members in its view (option ``no_members="error"``)."""


__all__ = [
    "A3MError",
    "NoMembers",
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
]
