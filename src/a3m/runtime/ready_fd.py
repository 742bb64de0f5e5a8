"""A socket's readiness as a file descriptor (pyzmq's ``FD``): for ``select``, ``poll``, an
event loop's ``add_reader`` and :class:`a3m.Poller` over sockets of several nodes.

The descriptor is the read end of a pipe, one per socket, made at its first
:meth:`a3m.Socket.fileno`. It becomes readable when the socket becomes ready for something it
was not ready for at the last look (a message came, credits or a link came back, a cookie's
outcome): edge-triggered, as pyzmq's. A look (:meth:`a3m.Socket.poll`) reads it clear first,
under the node's lock, then reads the socket's state and remembers it; a change after the look
posts again, so no wake-up is lost between a look and the next wait. Posting runs in the
node's listeners (after every turn and every application call that took the lock): a few
attribute reads per socket asked for its descriptor, nothing on a node with none.
"""

from __future__ import annotations

import os


class ReadyPipe:
    """The descriptor of one socket and what its last look saw (every call under the node's
    lock)."""

    __slots__ = ("r", "w", "posted", "seen")

    def __init__(self) -> None:
        self.r, self.w = os.pipe()  # (not inherited by child processes: PEP 446)
        os.set_blocking(self.r, False)
        os.set_blocking(self.w, False)
        self.posted = False  # a byte waits in the pipe: the descriptor is readable
        self.seen = 0  # the socket's events at the last look or change

    def changed(self, events: int) -> None:
        """After a change: make the descriptor readable if ``events`` has a bit the last look
        (or change) did not."""
        if events & ~self.seen and not self.posted:
            self.posted = True
            try:
                os.write(self.w, b"\0")
            except OSError:  # (a full pipe is readable already)
                pass
        self.seen = events

    def clear(self) -> None:
        """Before a look: read the descriptor clear (the look then reads the state)."""
        if self.posted:
            self.posted = False
            try:
                os.read(self.r, 4096)
            except OSError:
                pass

    def close(self) -> None:
        """Post once more (a waiter wakes, looks and finds the socket closed), then close
        both ends."""
        if self.w < 0:
            return
        try:
            os.write(self.w, b"\0")
        except OSError:
            pass
        for fd in (self.w, self.r):
            try:
                os.close(fd)
            except OSError:
                pass
        self.r = self.w = -1
