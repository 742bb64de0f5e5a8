"""A node-wide pace for the probes of first exchanges (:class:`FirstProbePacer`).

Before a round trip to a peer is measured, Exon's probe timeout and the secure handshake's
resends keep the initial timeout for their first tries (a lone link through heavy loss needs
them: ``docs/exon-wire.md``, "Loss recovery"). A node that starts thousands of first exchanges
at once would send ten probes a second for each: its own socket, and its peers', then drop the
answers, and the probes go on. The pacer gives every such probe a slot of one node-wide
schedule, ``rate`` a second after a burst: a probe whose slot lies ahead waits for it (the
caller arms its timer there). One link, or a few dozen, never waits.
"""

from __future__ import annotations

#: Probes of first exchanges a second, in all, when the config does not say.
FIRST_PROBE_RATE = 200.0
#: The schedule may lag this long behind the present (the burst: rate x this many probes).
FIRST_PROBE_BURST_S = 0.1


class FirstProbePacer:
    """Slots for the probes of first exchanges, ``rate`` a second after a burst of
    ``rate * burst_s`` (a reservation schedule: O(1) a probe, no queue). ``rate`` 0: no pace."""

    __slots__ = ("interval", "burst_s", "free_at", "deferred")

    def __init__(self, rate: float = FIRST_PROBE_RATE,
                 burst_s: float = FIRST_PROBE_BURST_S) -> None:
        self.interval = 1.0 / rate if rate > 0 else 0.0
        self.burst_s = burst_s
        self.free_at = -1e18  # the next free slot of the schedule
        self.deferred = 0  # probes given a slot later than asked (diagnostics)

    def slot(self, now: float) -> float:
        """Reserve a slot for a probe due at ``now``: ``now`` itself when the schedule has
        room, else the later time the probe must wait for (it is reserved: probe then)."""
        if not self.interval:
            return now
        t = self.free_at
        floor = now - self.burst_s
        if t < floor:
            t = floor
        self.free_at = t + self.interval
        if t <= now:
            return now
        self.deferred += 1
        return t

    def admit(self, reserved: float, now: float, grace: float) -> float:
        """For a probe that holds the slot ``reserved`` (0: none): 0.0 when it may go now
        (its slot came, within ``grace`` of it, or the schedule has room), else the slot it
        waits for (the one it held, or a new one reserved for it)."""
        if reserved:
            if reserved <= now < reserved + grace:
                return 0.0
            if now < reserved:
                return reserved
        t = self.slot(now)
        return 0.0 if t <= now else t
