"""The link between two sockets: handshake, unlink with a delivery goal, per-link state.

Seed 003's "final solution": a three-way handshake. LINK carries the sender's metadata; the
answer LINKACK carries a decision and, if not sent before, the answerer's metadata; whoever
receives metadata decides and answers with a LINKACK carrying its decision. Both decisions
positive establish the link. Every message carries both sides' incarnations, so a message of
an old link never touches a new one. ``docs/links.md`` has the sequence diagrams.

This module holds the state and the legal transitions (a table, h11 style); the socket core
(:mod:`a3m.core.socket_core`) applies the rules and produces the messages.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from enum import Enum
from typing import Any, Final

from mypy_extensions import mypyc_attr

from a3m.core.credits import CreditBudget, RecvCredits, SendCredits
from a3m.core.message import Metadata

# Link decisions carried by LINKACK (0 = accepted).
OK: Final = 0x00
# Non-fatal refusals: retried after a randomised, growing delay.
LINK_LIMIT: Final = 0x10
ALREADY_LINKED: Final = 0x11
NOT_FOUND: Final = 0x12  # the peer socket does not exist (yet): like a ZeroMQ connect, retry
# Fatal refusals: retrying would give the same answer.
INCOMPATIBLE: Final = 0x20
INCOMING_NOT_ALLOWED: Final = 0x21
CLOSED_SOCKET: Final = 0x22
REFUSED: Final = 0x23  # a custom link condition (decision hook) said no
CANCELLED: Final = 0x24

REASONS: Final = {
    OK: "accepted", LINK_LIMIT: "link limit reached", ALREADY_LINKED: "already linked",
    NOT_FOUND: "socket not found", INCOMPATIBLE: "incompatible socket types",
    INCOMING_NOT_ALLOWED: "incoming links not allowed", CLOSED_SOCKET: "socket closed",
    REFUSED: "refused by a link condition", CANCELLED: "cancelled",
}


def is_fatal(code: int) -> bool:
    return code >= 0x20


def most_severe(codes: list[int]) -> int:
    """The decision to send when several conditions fail: fatal beats non-fatal, then the
    first fatal reason listed (never "the last check wins")."""
    fatal = [c for c in codes if is_fatal(c)]
    if fatal:
        return fatal[0]
    return codes[0] if codes else OK


class State(Enum):
    LINKING = "linking"  # handshake under way (maybe with an unlink wanted: "cancelling")
    ESTABLISHED = "established"
    UNLINKING = "unlinking"  # UNLINK exchanged or under way; waiting for the delivery goal
    CLOSED = "closed"


class Ev(Enum):
    ESTABLISH = "both decisions positive (or DATA before the final LINKACK)"
    UNLINK_LOCAL = "unlink() called"
    UNLINK_PEER = "UNLINK received"
    GOAL_REACHED = "both UNLINKs exchanged and the peer's goal delivered"
    REFUSE = "a negative decision, sent or received"
    ABORT = "socket closed, protocol violation, or the peer lost the link"


#: The legal transitions; anything else is a bug (the core asserts through :func:`advance`).
TRANSITIONS: Final[dict[tuple[State, Ev], State]] = {
    (State.LINKING, Ev.ESTABLISH): State.ESTABLISHED,
    (State.LINKING, Ev.UNLINK_PEER): State.CLOSED,
    (State.LINKING, Ev.REFUSE): State.CLOSED,
    (State.LINKING, Ev.ABORT): State.CLOSED,
    (State.ESTABLISHED, Ev.UNLINK_LOCAL): State.UNLINKING,
    (State.ESTABLISHED, Ev.UNLINK_PEER): State.UNLINKING,
    (State.ESTABLISHED, Ev.ABORT): State.CLOSED,
    (State.UNLINKING, Ev.UNLINK_PEER): State.UNLINKING,
    (State.UNLINKING, Ev.GOAL_REACHED): State.CLOSED,
    (State.UNLINKING, Ev.ABORT): State.CLOSED,
}


@mypyc_attr(native_class=False)  # compiled: an exception of a builtin type
class IllegalTransition(AssertionError):
    def __init__(self, state: State, ev: Ev) -> None:
        super().__init__(f"link in state {state.value} cannot take event {ev.name}")


PeerId = tuple[str, str]  # (node id, socket tag)


class Link:
    """One link of a socket, to one peer socket."""

    __slots__ = (
        "peer", "state", "my_inc", "peer_inc", "initiator", "my_meta_sent", "peer_meta",
        "my_decision", "peer_decision", "unlink_wanted", "refusal", "unlink_sent", "peer_goal",
        "next_seq", "expected_seq", "reorder", "inq", "send", "recv", "ctrl_pending",
        "ordered", "peer_tag_bytes", "my_tag_bytes", "retries", "attrs", "processed",
        "data_head", "last_active", "pinged_at", "batches", "pending", "pending_seq",
        "pending_confirm", "data_in", "confirm_q", "taken_out", "dropped_out", "takens_sent",
        "last_taken", "ahead", "ready", "ka_at", "ka_jitter",
    )

    def __init__(self, peer: PeerId, my_inc: int, initiator: bool, capacity: int,
                 ordered: bool = True, capacity_max: int = 0,
                 budget: CreditBudget | None = None,
                 rtt_of: Callable[[], float | None] | None = None) -> None:
        self.peer = peer
        self.state = State.LINKING
        self.my_inc = my_inc
        self.peer_inc = 0
        self.initiator = initiator
        self.my_meta_sent = False
        self.peer_meta: Metadata | None = None
        self.my_decision: int | None = None
        self.peer_decision: int | None = None
        self.unlink_wanted = False
        self.refusal: int | None = None
        self.unlink_sent = False
        self.peer_goal: int | None = None
        self.next_seq = 1  # next sequence number to send
        self.expected_seq = 1  # next sequence number to process (ordered links)
        self.processed = 0  # sequenced messages handed to the pattern
        #: Sequenced messages that came early, by sequence number: (type, payload), or
        #: (BATCH, the payloads) for a BATCH starting there.
        self.reorder: dict[int, tuple[int, Any]] = {}
        self.inq: deque[bytes] = deque()
        #: In its socket's queue of links with messages waiting (``SocketCore._ready``).
        self.ready = False
        self.send = SendCredits(0)
        self.recv = RecvCredits(capacity, limit=capacity_max, budget=budget, rtt_of=rtt_of)
        self.ctrl_pending = 0
        self.ordered = ordered
        self.peer_tag_bytes = b""
        self.my_tag_bytes = b""
        #: (peer_inc, the extended header of this link's sequenced messages): cached by
        #: :meth:`SocketCore.send_on`, keyed by the incarnation it was built with.
        self.data_head: tuple[int, bytes] = (-1, b"")
        #: When a message last went either way on the link, and when this side last sent a
        #: PING on it (keepalive: see SocketOptions.keepalive_s).
        self.last_active = 0.0
        self.pinged_at = 0.0
        #: This link's keepalive deadline in its socket's timer heap (INF: none), and the
        #: factor of its idle probe's period (drawn when it is established: links that came
        #: up together do not probe together).
        self.ka_at = float("inf")
        self.ka_jitter = 1.0
        self.retries = 0
        #: The peer takes BATCH messages (it said ``batch`` in its LINK metadata).
        self.batches = False
        #: DATA sent and not yet handed to the transport (numbered from ``pending_seq``):
        #: what an application sends between two turns of the transport leaves as BATCHes.
        self.pending: list[bytes] = []
        self.pending_seq = 0
        #: Some DATA in ``pending`` was sent with a cookie (it leaves flagged: CONFIRM).
        self.pending_confirm = False
        # Cookies, receiving side (a3m.core.cookies): DATA processed on the link so far; the
        # flagged ones not yet taken, as (processing index, sequence number); what was taken
        # or dropped since the last TAKEN; TAKENs sent; the last one taken, if flagged.
        self.data_in = 0
        self.confirm_q: deque[tuple[int, int]] = deque()
        self.taken_out: list[int] = []
        self.dropped_out: list[int] = []
        self.takens_sent = 0
        self.last_taken = 0
        self.ahead = 0  # flagged ones the runtime read ahead, not yet reported
        self.attrs: dict[str, object] = {}  # for socket patterns (e.g. a subscription set)

    def advance(self, ev: Ev) -> State:
        new = TRANSITIONS.get((self.state, ev))
        if new is None:
            raise IllegalTransition(self.state, ev)
        self.state = new
        return new

    @property
    def established(self) -> bool:
        return self.state is State.ESTABLISHED

    @property
    def closed(self) -> bool:
        return self.state is State.CLOSED

    @property
    def can_send(self) -> bool:
        """Established and holding at least one credit."""
        return self.state is State.ESTABLISHED and self.send.edge > self.send.sent

    @property
    def last_seq_sent(self) -> int:
        return self.next_seq - 1

    def __repr__(self) -> str:
        return (f"<Link {self.peer[0]}/{self.peer[1]} {self.state.value} inc={self.my_inc}"
                f"/{self.peer_inc} q={len(self.inq)} credits={self.send.available}>")
