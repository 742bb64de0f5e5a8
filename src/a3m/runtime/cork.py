"""The cork window shared by :class:`a3m.Node` and :class:`a3m.exon.Endpoint`: a send that
follows the previous one within ``window_s`` (a stream) waits for the I/O thread's next turn,
at most ``window_s`` later, and leaves with what else is sent meanwhile; a send after a quiet
spell (a request, a reply) is handed off at once by the calling thread."""

from __future__ import annotations


class Cork:
    __slots__ = ("window_s", "sent_at", "until")

    def __init__(self, window_s: float) -> None:
        self.window_s = window_s
        self.sent_at = float("-inf")  # the last send
        #: When the I/O thread must have turned for what waits (the driver's deadline while
        #: output waits; in the past: at once).
        self.until = 0.0

    def follows(self, now: float) -> bool:
        """Record a send at ``now``; True when it follows the previous one within the window
        (hold it), False when it should be handed off now."""
        last, self.sent_at = self.sent_at, now
        return now - last < self.window_s

    def due(self, now: float) -> float:
        """The end of the open window (one opens at ``now`` when none is)."""
        if self.until <= now:
            self.until = now + self.window_s
        return self.until
