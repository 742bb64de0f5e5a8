"""``a3m.proxy``: a forwarder between two sockets (ZeroMQ's ``zmq_proxy``), e.g. XSUB -> XPUB.

Every message the frontend receives is sent on the backend (with its topic, if it has one),
and whatever the backend receives (an XPUB's subscriptions) is sent on the frontend. Sends
block: when the backend cannot take a message (a slow subscriber, no credits), the proxy stops
reading the frontend, so its credits stop and the publishers upstream wait. Nothing is dropped
in the proxy; a message is exactly once on each hop. A proxy that is killed loses what it took
from the frontend and had not yet sent (the crash model of any application).
"""

from __future__ import annotations

import threading

from a3m.errors import Closed
from a3m.runtime.sockets import POLLIN, Poller, Socket


def proxy(frontend: Socket, backend: Socket, stop: threading.Event | None = None,
          poll_s: float = 0.05) -> int:
    """Forward until ``stop`` is set or a socket closes; returns the messages forwarded
    frontend -> backend. Run it in a thread of its own (it blocks)."""
    poller = Poller()
    readers = [s for s in (frontend, backend) if s._core.receives]
    for sock in readers:
        poller.register(sock, POLLIN)
    forwarded = 0
    try:
        while stop is None or not stop.is_set():
            for sock, _ in poller.poll(poll_s):
                msg = sock.recv_msg(timeout=0)
                out = backend if sock is frontend else frontend
                kw = {} if msg.topic is None else {"topic": msg.topic}
                while True:  # block, but look at ``stop`` now and then
                    try:
                        out.send(msg.payload, timeout=poll_s, **kw)
                        break
                    except TimeoutError:
                        if stop is not None and stop.is_set():
                            return forwarded  # the message taken is lost with the proxy
                forwarded += sock is frontend
    except Closed:
        pass
    return forwarded


__all__ = ["proxy"]
