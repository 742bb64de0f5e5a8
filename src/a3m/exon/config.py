"""Tunable parameters of one Exon node (:class:`ExonConfig`)."""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any

from a3m.errors import UsageError
from a3m.exon.pacer import FIRST_PROBE_RATE


@dataclass(frozen=True, slots=True)
class ExonConfig:
    """Exon parameters; units are in the names. Defaults suit loopback and LANs."""

    #: Largest datagram the node sends (the path MTU budget for header + frames).
    max_datagram_size: int = 1400
    #: Largest datagram toward a loopback address (its path MTU is 64 KiB), used by runtimes
    #: through the protocol's ``path_mtu`` hook; 0 keeps ``max_datagram_size`` everywhere.
    loopback_datagram_size: int = 65000
    #: Tokens queued or unacknowledged per destination before ``send`` blocks (the notes' P);
    #: more, up to ``window_global``, when the peer's congestion window holds more tokens.
    window_per_peer: int = 2048
    #: Tokens queued or unacknowledged across all destinations before ``send`` blocks.
    window_global: int = 16384
    #: Envelopes a sender tries to keep in hand ahead of its queue (the notes' N); more when
    #: the congestion window holds more tokens (up to half ``max_live_slots``).
    slots_ahead: int = 2048
    #: Most slots one receive record keeps live (span from its lowest live slot to its end).
    max_live_slots: int = 65536
    #: Probe timeout before any RTT sample to a peer (a path's measurements outlive its send
    #: records, so this is the first exchange's timeout only). Afterwards the probe timeout is
    #: srtt + max(4 rttvar, 1 ms) + the peer's ACK delay, with no floor (``a3m.exon.recovery``).
    rto_initial_s: float = 0.2
    #: Longest probe timeout after back-off (it doubles on each consecutive expiry).
    rto_max_s: float = 2.0
    #: Probes of first exchanges (Exon's probe timeouts toward peers with no RTT sample yet,
    #: and the secure handshake's HELLO and INITIATE resends), a second, in all, after a
    #: burst of a tenth of a second's worth: beyond it each waits for its slot
    #: (``a3m.exon.pacer``). One link, or a few dozen, never waits; a node starting
    #: thousands of first exchanges at once does not flood itself and its peers. 0: no pace.
    first_probe_rate: float = FIRST_PROBE_RATE
    #: Longest an ACK waits for a frame to the same peer to ride with (a reply, usually), so a
    #: request/reply exchange costs one datagram each way instead of two; 0 = ack at once.
    #: Duplicates, a second datagram of tokens and closing are acknowledged at once.
    ack_delay_s: float = 0.002
    #: Runtime, not protocol: an application thread about to sleep waiting for the network
    #: first polls its socket this long, when the process may use two CPUs or more and polls
    #: keep paying off (adaptive); it saves a thread wake-up (tens of microseconds) per hop of
    #: a request/reply exchange, for at most this much CPU per wait. 0 turns it off.
    busy_poll_s: float = 0.0002
    #: Runtime, not protocol: messages an application sends within this long of the node's
    #: last hand-off to the transport wait for the next one (at most this long), so a stream
    #: leaves as BATCHes instead of one message per hand-off; a message sent after a quiet
    #: spell (a request, a reply) still leaves at once. 0 hands every message off at once.
    cork_s: float = 0.00005
    #: New tokens leave at the congestion controller's pacing rate (BBR's pacing: a window
    #: spread over the round trip, not sent in one burst) on paths whose least round trip
    #: is 1 ms or more; ``False`` sends each window as fast as it opens.
    pacing: bool = True
    #: A send record with nothing queued or in flight for this long releases and is discarded.
    idle_release_s: float = 1.0
    #: A receive record with no traffic for this long probes its sender (or is discarded if empty).
    probe_interval_s: float = 5.0
    #: Longest probe interval after back-off (a sender that is gone forever).
    probe_interval_max_s: float = 60.0
    #: Largest payload accepted by ``send`` and by reassembly.
    max_message_size: int = 64 * 1024 * 1024
    #: The receiver grants new slots only while delivered-but-unconsumed bytes stay below this.
    recv_buffer_bytes: int = 32 * 1024 * 1024
    #: Slots reserved in the clock store per write (fewer writes, larger jumps after a crash).
    clock_reserve_block: int = 1 << 20
    #: Longest ``close`` waits for a sender to confirm the revocation of the slots we granted
    #: it (REVOKED). A sender that never answers is then given up: to it, our next incarnation
    #: looks like a crash (messages of unknown outcome, never a silent loss). ``inf``: wait
    #: as long as the caller of ``close`` does.
    close_revoke_timeout_s: float = 10.0
    #: After a clean close (``ExonProtocol.is_closed``), how long the node lingers, in units of
    #: ``rto_max_s`` (the longest a peer waits between two retransmissions): its runtime keeps
    #: the socket open in the background and answers its peers' late frames (an ACK lost for
    #: their last token, their own REVOKE, a release of ours that was lost), so that *their*
    #: close completes promptly. Nothing depends on it for correctness; 0 = no linger.
    close_linger_rtos: float = 4.0
    #: A peer that holds messages of ours unacknowledged (or whose slots our messages wait
    #: for) and from which nothing at all was heard for this long is reported once with a
    #: ``PeerUnreachable`` event (``PeerReachable`` when it is heard again). A signal only:
    #: retransmission goes on. A closing node gives such a peer up (``abandon``: its messages
    #: are reported, never silently dropped), so a close does not wait for a dead peer for
    #: ever. 0 = never; else at least ``rto_max_s`` (a live peer must get several
    #: retransmissions to answer: 4 x ``rto_max_s`` or more is advisable).
    peer_timeout_s: float = 15.0
    #: Secure associations (``docs/exon-wire.md``): every datagram authenticated and encrypted
    #: under keys from a handshake. ``False`` opts out, for trusted networks and benchmarks
    #: only: then anyone who can send a datagram to the node can read, steal or stop its
    #: traffic. Both ends must agree.
    secure: bool = True
    #: Which key may speak as a node id without a pin: ``"tofu"`` (the first key seen for it,
    #: for this node's lifetime) or ``"strict"`` (only pinned keys).
    trust: str = "tofu"
    #: Handshakes per second answered at once; beyond it a HELLO is answered with an address
    #: token (RETRY), so a flood from forged addresses costs no key exchange.
    handshake_rate: float = 1000.0
    #: RETRYs a second at most, in all; beyond it a HELLO without a token is dropped unread
    #: (counted ``unauth_shed``), so a flood from forged addresses costs the node, and
    #: reflects to them, no more than this (docs/exon-wire.md, "Under load").
    retry_rate: float = 2000.0
    #: A session's initiator starts a new handshake when the session is this old; a session
    #: 1.5x as old is refused.
    rekey_after_s: float = 120.0
    #: A session with no datagram either way for this long (or 4 handshake round trips) is
    #: forgotten (memory returns to its baseline); the next datagram to that peer starts a
    #: new handshake (one round trip).
    session_idle_s: float = 120.0

    def __post_init__(self) -> None:
        if not 128 <= self.max_datagram_size <= 65507:
            raise UsageError("max_datagram_size must be within 128..65507")
        if self.loopback_datagram_size and not 128 <= self.loopback_datagram_size <= 65507:
            raise UsageError("loopback_datagram_size must be 0 or within 128..65507")
        for name in ("window_per_peer", "window_global", "slots_ahead", "max_live_slots",
                     "max_message_size", "recv_buffer_bytes", "clock_reserve_block"):
            if getattr(self, name) < 1:
                raise UsageError(f"{name} must be positive")
        if not 0 < self.rto_initial_s <= self.rto_max_s:
            raise UsageError("need 0 < rto_initial_s <= rto_max_s")
        if self.first_probe_rate < 0:
            raise UsageError("first_probe_rate must be >= 0 (0: no pace)")
        if not 0 <= self.busy_poll_s <= 0.01:
            raise UsageError("busy_poll_s must be within 0 <= busy_poll_s <= 0.01")
        if not 0 <= self.cork_s <= 0.01:
            raise UsageError("cork_s must be within 0 <= cork_s <= 0.01")
        if not 0 <= self.ack_delay_s <= 0.1:
            raise UsageError("ack_delay_s must be within 0..0.1 s")
        if self.idle_release_s < 0 or self.probe_interval_s <= 0:
            raise UsageError("idle_release_s must be >= 0 and probe_interval_s > 0")
        if not self.close_revoke_timeout_s > 0:
            raise UsageError("close_revoke_timeout_s must be > 0")
        if not 0 <= self.close_linger_rtos <= 1000:
            raise UsageError("close_linger_rtos must be within 0..1000")
        if self.peer_timeout_s != 0 and not self.peer_timeout_s >= self.rto_max_s:
            raise UsageError("peer_timeout_s must be 0 (never) or >= rto_max_s")
        if self.trust not in ("tofu", "strict"):
            raise UsageError("trust must be 'tofu' or 'strict'")
        if self.retry_rate < 0:
            raise UsageError("retry_rate must be >= 0")
        if self.handshake_rate < 0 or not self.rekey_after_s > 0 or not self.session_idle_s > 0:
            raise UsageError("handshake_rate must be >= 0, rekey_after_s and session_idle_s > 0")
        if self.max_live_slots < self.slots_ahead:
            raise UsageError("max_live_slots must be >= slots_ahead")

    @property
    def close_linger_s(self) -> float:
        """The linger after a clean close, in seconds (``close_linger_rtos * rto_max_s``)."""
        return self.close_linger_rtos * self.rto_max_s

    @classmethod
    def from_options(cls, options: dict[str, Any]) -> ExonConfig:
        """Build a config from keyword options, rejecting unknown names clearly."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(options) - known)
        if unknown:
            raise UsageError(f"unknown Exon option(s): {', '.join(unknown)}")
        return replace(cls(), **options)
