"""One secure session with a peer: transport keys, counters, replay window and path state.

What sealing and opening read and change per datagram (the counter, the replay window, when
the peer was last heard and sent to, the datagrams unanswered, whether the session is
confirmed, its proven address and candidate, its lifetimes) lives in the session's
:class:`SessionPath`; :class:`Session` reads and writes it through properties. Where
``a3m.NATIVE``, the path is ``a3m._native.SessionPath``, kept in Rust: the native engine opens
and seals a live session's datagrams from it without calling into Python, and
:class:`SessionTable` (native too) lists the live ones by index and by peer.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any, Final, Protocol

from a3m._dataplane import native
from a3m.exon.secure.aead import Cipher, new_cipher
from a3m.exon.secure.replay import ReplayWindow

Address = Hashable
INF: Final = float("inf")


class PathState(Protocol):
    """What a session keeps per datagram (:class:`SessionPath` or its native twin)."""

    peer: str
    local_index: int
    remote_index: int
    initiator: bool
    counter: int
    last_recv: float
    last_sent: float
    unanswered: int
    confirmed: bool
    candidate: Any
    addr: Any
    reject_at: float
    rekey_at: float
    silence_s: float
    rtt: float

    @property
    def top(self) -> int: ...

    def fresh(self, counter: int) -> bool: ...

    def accept(self, counter: int) -> None: ...


class SessionPath:
    """A session's per-datagram state: the Python twin of ``a3m._native.SessionPath``. Also
    the replay window's interface (``top``, ``fresh``, ``accept``: ``Session.replay``)."""

    __slots__ = ("peer", "local_index", "remote_index", "initiator", "counter", "last_recv",
                 "last_sent", "unanswered", "confirmed", "candidate", "addr", "reject_at",
                 "rekey_at", "silence_s", "rtt", "_window")

    def __init__(self, peer: str, local_index: int, remote_index: int, send_key: bytes,
                 recv_key: bytes, initiator: bool, addr: Address, now: float) -> None:
        self.peer = peer
        self.local_index = local_index
        self.remote_index = remote_index
        self.initiator = initiator
        self.counter = 0
        self.last_recv = now
        self.last_sent = now
        self.unanswered = 0  # datagrams sealed since the last one opened under the session
        # The initiator's session is confirmed by the first datagram that opens under it.
        self.confirmed = not initiator
        self.candidate: Any = None
        self.addr: Any = addr
        self.reject_at = INF  # the session is dropped then
        self.rekey_at = INF  # the initiator starts a new handshake from then on
        #: Silence (with datagrams unanswered) after which the initiator starts a new
        #: handshake, in case the peer restarted (doubled after each that found it slow).
        self.silence_s = 1.0
        self.rtt = 0.0  # the handshake's round trip (an upper bound for the initiator)
        self._window = ReplayWindow()

    @property
    def top(self) -> int:
        return self._window.top

    def fresh(self, counter: int) -> bool:
        return self._window.fresh(counter)

    def accept(self, counter: int) -> None:
        self._window.accept(counter)


class SessionTable:
    """The live sessions' paths by index and the current one by peer: the Python twin of
    ``a3m._native.SessionTable`` (the secure layer keeps it beside its own dictionaries; the
    native engine reads its twin)."""

    __slots__ = ("by_index", "current")

    def __init__(self) -> None:
        self.by_index: dict[int, PathState] = {}
        self.current: dict[str, PathState] = {}

    def install(self, index: int, path: PathState) -> None:
        self.by_index[index] = path
        self.current[path.peer] = path

    def drop(self, index: int, path: PathState) -> None:
        self.by_index.pop(index, None)
        if self.current.get(path.peer) is path:
            del self.current[path.peer]

    def __len__(self) -> int:
        return len(self.by_index)


def new_session_table() -> Any:
    """The table that runs: native where ``a3m.NATIVE`` (the engine reads it), else the twin."""
    return native.SessionTable() if native is not None else SessionTable()


class Session:
    """Keys of one completed handshake, and where the peer is.

    ``addr`` is the validated path. A newer authenticated datagram from elsewhere makes that
    address the ``candidate``: it gets at most 3x the bytes received from it (``budget``) until
    it answers a path challenge, and then becomes ``addr``. The per-datagram fields are its
    :class:`SessionPath`'s (``path``), read and written through properties.
    """

    __slots__ = ("peer", "local_index", "remote_index", "seal", "open", "path", "budget",
                 "challenge", "challenge_tries", "initiator", "incarnation", "created",
                 "initiate", "initiate_tries", "timer_at", "alive", "next_send_at",
                 "handshake_key", "paced_at", "silenced", "busy", "rtt_sample")

    def __init__(self, peer: str, local_index: int, remote_index: int,
                 keys: tuple[bytes, bytes], initiator: bool, incarnation: int, addr: Address,
                 now: float) -> None:
        self.peer = peer
        self.local_index = local_index
        self.remote_index = remote_index
        send_key, recv_key = keys if initiator else (keys[1], keys[0])
        self.seal: Cipher = new_cipher(send_key)  # (native where a3m.NATIVE: aead.py)
        self.open: Cipher = new_cipher(recv_key)
        self.path: PathState = (
            native.SessionPath(peer, local_index, remote_index, send_key, recv_key, initiator,
                               addr, now)
            if native is not None else
            SessionPath(peer, local_index, remote_index, send_key, recv_key, initiator, addr,
                        now))
        self.budget = 0
        self.challenge = b""
        self.challenge_tries = 0
        self.initiator = initiator
        self.incarnation = incarnation
        self.created = now
        # Until confirmed, INITIATE (kept here) is sent again on the timer.
        self.initiate = b""
        self.initiate_tries = 0
        self.timer_at = INF
        self.next_send_at = INF  # the next INITIATE or path challenge resend
        self.alive = True
        self.handshake_key = b""  # the responder's replay key of the handshake (initiator e)
        self.paced_at = 0.0  # the slot of the node's first-probe pace an INITIATE resend waits for
        #: ``silenced``: a new handshake was started from this session for its silence.
        self.silenced = False
        #: The responder answered our HELLO with a RETRY (past its handshake rate): it is
        #: loaded, so this first exchange's resends and probes back off from the first.
        self.busy = False
        #: The initiator's lower bound of the handshake's round trip (0: none).
        self.rtt_sample = 0.0

    # The per-datagram state, in the path (its native twin where a3m.NATIVE).

    @property
    def replay(self) -> PathState:
        """The replay window (``top``, ``fresh``, ``accept``)."""
        return self.path

    @property
    def counter(self) -> int:
        return self.path.counter

    @counter.setter
    def counter(self, v: int) -> None:
        self.path.counter = v

    @property
    def last_recv(self) -> float:
        return self.path.last_recv

    @last_recv.setter
    def last_recv(self, v: float) -> None:
        self.path.last_recv = v

    @property
    def last_sent(self) -> float:
        return self.path.last_sent

    @last_sent.setter
    def last_sent(self, v: float) -> None:
        self.path.last_sent = v

    @property
    def unanswered(self) -> int:
        return self.path.unanswered

    @unanswered.setter
    def unanswered(self, v: int) -> None:
        self.path.unanswered = v

    @property
    def confirmed(self) -> bool:
        return self.path.confirmed

    @confirmed.setter
    def confirmed(self, v: bool) -> None:
        self.path.confirmed = v

    @property
    def candidate(self) -> Any:
        return self.path.candidate

    @candidate.setter
    def candidate(self, v: Any) -> None:
        self.path.candidate = v

    @property
    def addr(self) -> Any:
        return self.path.addr

    @addr.setter
    def addr(self, v: Any) -> None:
        self.path.addr = v

    @property
    def reject_at(self) -> float:
        return self.path.reject_at

    @reject_at.setter
    def reject_at(self, v: float) -> None:
        self.path.reject_at = v

    @property
    def rekey_at(self) -> float:
        return self.path.rekey_at

    @rekey_at.setter
    def rekey_at(self, v: float) -> None:
        self.path.rekey_at = v

    @property
    def silence_s(self) -> float:
        return self.path.silence_s

    @silence_s.setter
    def silence_s(self, v: float) -> None:
        self.path.silence_s = v

    @property
    def rtt(self) -> float:
        return self.path.rtt

    @rtt.setter
    def rtt(self, v: float) -> None:
        self.path.rtt = v
