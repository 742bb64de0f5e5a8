"""The node core over an Exon protocol, without I/O: the one place that turns Exon's events into
core calls and moves what the core sends into Exon. ``a3m.Node`` drives it over real sockets and
the simulator's host over the simulated network, so both behave alike by construction."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

from a3m.core.node_core import NodeCore
from a3m.errors import Closed, WouldBlock
from a3m.exon.engine import Transport
from a3m.exon.events import (
    Delivered,
    Event,
    KeyRefused,
    NotDelivered,
    OutcomeUnknown,
    PeerReachable,
    PeerRestarted,
    PeerUnreachable,
)


class ExonBridge:
    """Joins a :class:`NodeCore` to an Exon engine (:class:`~a3m.exon.engine.Transport`:
    ``ExonProtocol`` or its native twin).

    ``outbox`` holds what the core sent that Exon cannot take yet (its window is full); the
    core's credits bound it, so nothing is dropped to make room.
    """

    def __init__(self, core: NodeCore, proto: Transport,
                 on_key_refused: Callable[[str, bytes], None] | None = None,
                 on_peer_event: Callable[[str, str, int, str], None] | None = None) -> None:
        self.core = core
        self.proto = proto
        #: Told of each handshake refused for its key (the runtime logs it).
        self.on_key_refused = on_key_refused
        #: Told of what happens to a peer node (the runtime's node events):
        #: ``fn(kind, peer, unknown, reason)``, kind ``peer_unreachable``,
        #: ``peer_reachable`` or ``peer_restarted``; ``unknown``: messages sent with a cookie
        #: that it left of unknown outcome.
        self.on_peer_event = on_peer_event
        core.rtt = proto.srtt
        core.unfragmented = proto.max_unfragmented
        self.outbox: deque[tuple[str, bytes]] = deque()
        self.peers_unreachable = 0  # PeerUnreachable events handled (links ended)
        self.peers_reachable = 0
        self.peers_restarted = 0  # PeerRestarted events handled (links ended)
        #: Messages the core produced after Exon began closing (late answers: refusals,
        #: relinks), which go nowhere. The runtime's close moves the outbox into Exon before
        #: it closes Exon, so no DATA sent before the close is among them.
        self.dropped_closing = 0

    def on_events(self, events: deque[Event], now: float) -> None:
        """Handle ``events``, taking each one off the deque before handling it: when a handler
        raises, the events not yet taken stay queued for the caller to go on with."""
        core, proto = self.core, self.proto
        nbytes = 0
        # (the calls written out: compiled, a bound method in a local is an object made per
        # call and a generic call through it, where ``core.receive`` is a direct one)
        try:
            while events:
                ev = events.popleft()
                if type(ev) is Delivered:
                    nbytes += len(ev.payload)
                    core.receive(ev.source, ev.payload, now)
                elif type(ev) is OutcomeUnknown or type(ev) is NotDelivered:
                    # Its node crashed, or was given up: its link cannot go on.
                    core.message_lost(ev.destination, ev.payload, now,
                                      type(ev) is NotDelivered)
                elif type(ev) is PeerUnreachable:
                    before = core.unknown_outcomes()
                    self.peer_unreachable(ev.peer, now)
                    events.extend(proto.drain_events())  # what abandon() reported
                    if self.on_peer_event is not None:
                        self.on_peer_event("peer_unreachable", ev.peer,
                                           core.unknown_outcomes() - before,
                                           f"silent for {ev.silent_s:.1f} s")
                elif type(ev) is PeerReachable:
                    self.peers_reachable += 1
                    if self.on_peer_event is not None:
                        self.on_peer_event("peer_reachable", ev.peer, 0, "heard again")
                elif type(ev) is PeerRestarted:
                    events.extend(self.peer_restarted(ev.peer, now))
                elif type(ev) is KeyRefused and self.on_key_refused is not None:
                    self.on_key_refused(ev.peer, ev.key)
        finally:
            proto.consumed(nbytes)  # the core's credits bound what it keeps

    def peer_unreachable(self, peer: str, now: float) -> None:
        """Exon reports ``peer`` silent for ``peer_timeout_s`` while it holds messages of ours:
        every link to it ends (a REQ waiting on it gets LinkError; a link this side initiated
        is linked again later, with back-off, so a healed partition relinks), and Exon gives
        up what it still holds for it: those messages belong to links that just ended, and
        resending them to a peer that comes back would only replay them on links it may still
        hold (docs/design.md, "Peer liveness")."""
        self.peers_unreachable += 1
        self.core.peer_lost(peer, now, "peer unreachable")
        self.proto.abandon(peer, now)

    def peer_restarted(self, peer: str, now: float) -> list[Event]:
        """A handshake named a new incarnation of ``peer``: its links are gone there, so ours
        end now (their cookies' outcomes with them; links this side initiated link again),
        not at the next PING. First, Exon gives up what it still holds for the old
        incarnation: those messages belong to the links that end, and the new incarnation,
        which holds no link, would only refuse them ("not linked") while their senders took
        them for sent; what never wholly left is reported so (NOT_DELIVERED), the rest is of
        unknown outcome."""
        self.peers_restarted += 1
        core = self.core
        before = core.unknown_outcomes()
        proto = self.proto
        proto.abandon(peer, now)
        rest: list[Event] = []
        for ev in proto.drain_events():  # abandon's reports, handled before the links end
            if type(ev) is OutcomeUnknown or type(ev) is NotDelivered:
                core.message_lost(ev.destination, ev.payload, now, type(ev) is NotDelivered,
                                  "peer restarted")
            else:
                rest.append(ev)
        core.peer_lost(peer, now, "peer restarted")
        if self.on_peer_event is not None:
            self.on_peer_event("peer_restarted", peer, core.unknown_outcomes() - before,
                               "a new incarnation answered")
        return rest

    def has_output(self) -> bool:
        """Whether :meth:`pump` has something to move."""
        return bool(self.outbox) or self.core.has_output()

    def ready(self) -> bool:
        """Whether :meth:`pump` would move something into Exon now. Not while the outbox
        waits for Exon's window (only an ACK opens it, and the turn that reads the ACK pumps):
        a runtime that took that output for due would turn without end meanwhile (a secure
        1500-byte stream's sender spun 77 000 empty turns per 1 000 x 64 KiB, issue 31)."""
        outbox = self.outbox
        if outbox:
            return self.proto.can_send(outbox[0][0]) or self.proto.closing
        return self.core.has_output()

    def waits(self) -> bool:
        """Whether output waits for Exon's window (the outbox's head is refused by it)."""
        outbox = self.outbox
        return bool(outbox) and not (self.proto.can_send(outbox[0][0]) or self.proto.closing)

    def pump(self, now: float) -> None:
        """Move what the core produced into Exon, as far as its windows allow."""
        out = self.core.take_output()
        outbox = self.outbox
        if out:
            outbox.extend(out)
        proto = self.proto
        if not outbox or not (proto.can_send(outbox[0][0]) or proto.closing):
            return  # a full window: an ACK's turn pumps again (no WouldBlock raised per send)
        while outbox:
            dst, data = outbox[0]
            try:
                proto.send(dst, data, now)  # (no bound method made per pump: see on_events)
            except WouldBlock:
                break
            except Closed:  # the node is closing: late answers (refusals, relinks) go nowhere
                self.dropped_closing += len(outbox)
                outbox.clear()
                break
            outbox.popleft()


__all__ = ["ExonBridge"]
