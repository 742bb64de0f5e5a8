"""What :class:`a3m.Node` does per message and per turn, compiled (``a3m/_compiled.py``): its
driver's hooks (``upper_deadline``, ``upper_output``, ``on_turn``) and the after-call of every
application call (``after_call``).

Each function takes the node first; the node binds them to itself (``functools.partial``), so
a call runs no interpreted frame. They read and write the node's own attributes, so the node
stays a plain Python class (``a3m.aio``'s ``LoopNode`` subclasses it) and these functions
are its methods in all but name. Everything here runs under the driver's lock.
"""

from __future__ import annotations

import time
from typing import Any

from a3m.core.transport import ExonBridge

#: While an inbox holds messages sent with a cookie, the I/O thread looks this often for
#: those the application took (their outcome is reported at that turn, or sooner).
AHEAD_LOOK_S = 0.002
#: A report of what the application took (cookies) waits at most this long for other output
#: to ride with (a REP's reply follows its recv) or for a turn (an ACK's, usually sooner).
TAKEN_DELAY_S = 0.02


def upper_deadline(node: Any) -> float | None:
    """When the core needs a turn: its next timer, or while it holds output that Exon can
    take, the end of the cork window (see :func:`after_call`; past: at once). Output that
    waits for Exon's window sets no deadline: the ACK that opens the window comes through
    the socket, and its turn pumps."""
    bridge: ExonBridge = node._bridge  # (typed: its methods are called directly, not by name)
    core = bridge.core  # (the node's own: an attribute of a compiled class, read directly)
    t: float | None = core.next_timer()
    if node._buffering or bridge.ready():
        due: float = node._cork.until
        if t is None or due < t:
            t = due
    if node._reading_ahead:
        due = time.monotonic() + AHEAD_LOOK_S
        if t is None or due < t:
            t = due
    if core.taken_waiting():
        due = node._taken_due
        if t is None or due < t:
            t = due
    if core.nodes_watched and getattr(node._resolver, "nodes", None) is not None:
        due = node._nodes_listed_at + 1.0  # a discovery file, looked at every second
        if t is None or due < t:
            t = due
    return t


def upper_output(node: Any) -> bool:
    """The node has output that :func:`on_turn` hands to the protocol."""
    bridge: ExonBridge = node._bridge
    return bool(node._buffering or node._stalled) or bridge.ready()


def on_turn(node: Any, now: float) -> None:
    """The layer above's part of a driver's turn: the node's timers, the sockets' buffered
    sends and read-ahead reports, the core's output into Exon, the listeners."""
    if now >= node._shed_look_at and node._proto.secure is not None:
        node._look_at_handshakes(now)
    bridge: ExonBridge = node._bridge
    core = bridge.core
    if core.nodes_watched:
        node._list_nodes(now)
    t = core.next_timer()
    if t is not None and t <= now:
        core.handle_timer(now)
        node._driver.notify_all()
    if node._buffering or node._stalled:
        take_buffers(node, now)
    if node._reading_ahead:
        for sock in list(node._reading_ahead):
            sock._report()
    bridge.pump(now)
    lender = node._lender
    if lender is not None and lender.waiting:  # REQ and REP sockets to lend (taken back)
        lender.lend_waiting()
    if node._listeners:  # (an empty list's loop makes an iterator all the same)
        for fn in node._listeners:
            fn()


def after_call(node: Any, now: float = -1.0, sock: Any = None) -> None:
    """After an application call changed the core: its output leaves now from this thread,
    unless a turn is under way (its loop takes it).

    For a send at ``now`` (not negative): within the cork window of the previous send
    (:class:`~a3m.runtime.cork.Cork`) the output waits for the I/O thread's turn, by the
    window's end, and leaves with what else comes meanwhile, as BATCHes. There, a stream's
    socket (``sock``) also opens its send buffer (:meth:`a3m.Socket.send`)."""
    drv = node._driver
    # (not drv.turn_under_way and drv.notify_all() when someone waits, inline: both drivers
    # keep these flags, and a call each costs more than the looks)
    idle = drv._sleeping or not drv._running
    corked = False
    cork = node._cork
    if now >= 0:
        last = cork.sent_at  # (cork.follows(now), inline)
        cork.sent_at = now
        corked = now - last < cork.window_s
    bridge: ExonBridge = node._bridge
    if corked:
        if sock is not None and sock._sbuf.room == 0 and not sock._sbuf.stalled:
            sock._open_buffer(cork.due(now))
        if idle and bridge.ready():
            drv.wake_by(cork.due(now))
    elif idle and bridge.has_output():
        bridge.pump(time.monotonic())
        drv.flush()
    elif bridge.core.taken_waiting():  # a report alone waits a little for company
        now = time.monotonic()
        if node._taken_due < now:  # (else: an earlier report's delay runs already)
            node._taken_due = now + TAKEN_DELAY_S
        # A turn by then (waking the I/O thread only if it would sleep past it: a wake-up
        # per REQ/REP round trip cost ~80 us; the ACK of what was taken usually brings a
        # turn sooner).
        drv.wake_by(node._taken_due)
    lender = node._lender
    if lender is not None and lender.waiting:  # REQ and REP sockets to lend (taken back)
        lender.lend_waiting()
    if drv._waiters or drv._leader is not None or drv._futures:
        drv.notify_all()
    if node._listeners:
        for fn in node._listeners:
            fn()


def take_buffers(node: Any, now: float) -> None:
    """On a turn (the I/O thread's, or a leader leaving): hand what the sockets buffered to
    the core. A buffer that gave something opens again for the next window, as far as the
    credits go; one that gave nothing stays open until its window ends, then closes (the
    next send takes the lock again)."""
    moved = False
    for sock in list(node._stalled):
        moved = sock._drain(now) or moved
    cork = node._cork
    for sock in list(node._buffering):
        if sock._drain(now):
            moved = True
            room = sock._core.send_room()
            if room > 0 and not sock._sbuf.stalled:
                sock._open_buffer(cork.due(now), room)
                continue
        elif now < cork.until:
            continue
        sock._close_buffer()
    if moved:  # local links: the receiving socket is on this node
        node._driver.notify_all()
        for fn in node._listeners:
            fn()
