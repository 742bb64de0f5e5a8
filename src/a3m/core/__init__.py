"""The A3M core, sans-I/O: middleware messages, links, credits, the socket engine, the node.

Public extension points for socket kinds: subclass :class:`SocketCore` and register the class
(or any factory) with ``Node.register_socket_type(name, factory)``.
"""

from __future__ import annotations

from a3m.core.link import Link, State
from a3m.core.message import Message, Metadata
from a3m.core.node_core import NodeCore
from a3m.core.socket_core import Received, SocketCore, SocketOptions

__all__ = ["Link", "Message", "Metadata", "NodeCore", "Received", "SocketCore",
           "SocketOptions", "State"]
