"""One secure session with a peer: transport keys, counters, replay window and path state."""

from __future__ import annotations

from collections.abc import Hashable
from typing import Final

from a3m.exon.secure.aead import Cipher, new_cipher
from a3m.exon.secure.replay import Replay, new_replay_window

Address = Hashable
INF: Final = float("inf")


class Session:
    """Keys of one completed handshake, and where the peer is.

    ``addr`` is the validated path. A newer authenticated datagram from elsewhere makes that
    address the ``candidate``: it gets at most 3x the bytes received from it (``budget``) until
    it answers a path challenge, and then becomes ``addr``.
    """

    __slots__ = ("peer", "local_index", "remote_index", "seal", "open", "counter", "replay",
                 "addr", "candidate", "budget", "challenge", "challenge_tries", "initiator",
                 "incarnation", "created", "last_recv", "last_sent", "confirmed",
                 "initiate", "initiate_tries", "rtt", "unanswered", "rekey_at", "reject_at",
                 "timer_at", "alive", "next_send_at", "handshake_key", "paced_at",
                 "silence_s", "silenced", "busy", "rtt_sample")

    def __init__(self, peer: str, local_index: int, remote_index: int,
                 keys: tuple[bytes, bytes], initiator: bool, incarnation: int, addr: Address,
                 now: float) -> None:
        self.peer = peer
        self.local_index = local_index
        self.remote_index = remote_index
        send_key, recv_key = keys if initiator else (keys[1], keys[0])
        self.seal: Cipher = new_cipher(send_key)  # (native where a3m.NATIVE: aead.py)
        self.open: Cipher = new_cipher(recv_key)
        self.counter = 0
        self.replay: Replay = new_replay_window()  # (native where a3m.NATIVE: replay.py)
        self.addr: Address = addr
        self.candidate: Address | None = None
        self.budget = 0
        self.challenge = b""
        self.challenge_tries = 0
        self.initiator = initiator
        self.incarnation = incarnation
        self.created = now
        self.last_recv = now
        self.last_sent = now
        # The initiator's session is confirmed by the first datagram that opens under it;
        # until then INITIATE (kept here) is sent again on the timer.
        self.confirmed = not initiator
        self.initiate = b""
        self.initiate_tries = 0
        self.unanswered = 0  # datagrams sealed since the last one opened under the session
        self.rekey_at = INF  # the initiator starts a new handshake from then on
        self.reject_at = INF  # the session is dropped then
        self.rtt = 0.0  # the handshake's round trip (an upper bound for the initiator)
        self.timer_at = INF
        self.next_send_at = INF  # the next INITIATE or path challenge resend
        self.alive = True
        self.handshake_key = b""  # the responder's replay key of the handshake (initiator e)
        self.paced_at = 0.0  # the slot of the node's first-probe pace an INITIATE resend waits for
        #: Silence (with datagrams unanswered) after which the initiator starts a new
        #: handshake, in case the peer restarted (SILENCE_REHANDSHAKE_S, doubled after each
        #: that found the peer only slow); ``silenced``: it did so from this session.
        self.silence_s = 1.0
        self.silenced = False
        #: The responder answered our HELLO with a RETRY (past its handshake rate): it is
        #: loaded, so this first exchange's resends and probes back off from the first.
        self.busy = False
        #: The initiator's lower bound of the handshake's round trip (0: none).
        self.rtt_sample = 0.0
