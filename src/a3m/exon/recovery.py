"""Loss recovery and congestion control for the path to one peer, without I/O.

On the lines of QUIC's (RFC 9002), with Exon's slots in the role of packet numbers; the
argument and the constants are in ``docs/exon-wire.md`` ("Loss recovery"):

- **RTT**: smoothed RTT and variance (RFC 6298 weights), minimum RTT, latest sample. Samples
  come only from first transmissions (a token resent keeps its slot, so the ACK of a
  retransmission is ambiguous: Karn's rule) and from SLOTS answering a first REQSLOTS.
- **Probe timeout** = srtt + max(4 rttvar, granularity) + the peer's largest ACK delay,
  doubled on each consecutive expiry and back to its base on any acknowledged progress;
  before any sample, the initial timeout, held for ``UNSAMPLED_STEADY_PTOS`` expiries
  before it doubles.
- **Loss detection**: a token is lost when one sent 3 transmissions later was acknowledged
  (packet threshold), or when one sent later was acknowledged and it is older than 9/8 of
  max(srtt, latest RTT) (time threshold). Once the path shows reordering (a first
  transmission acknowledged after a later one), only the time threshold is used, as RACK
  does (RFC 8985): on such a path the packet threshold retransmits what is merely late
  (three spurious retransmissions count as such evidence too); and each retransmission found
  spurious (its ACK came back sooner after it than half the minimum
  RTT: it acknowledged the first copy) widens the time threshold by a quarter, up to 4x. The
  protocol scans its tokens; this object keeps the transmission sequence, the largest
  acknowledged one and the thresholds.
- **Congestion control**, model-based on BBR's lines: the window is 2 x the largest recent
  delivery rate x the minimum RTT (at least 2 datagrams; 10 before any measure). While the
  path delivers more than before, the window doubles each round trip (a slow start); random
  loss, which Exon exists to survive, barely moves it (NewReno would halve it at every loss,
  and at 5 % loss hold a stream to a few datagrams per round trip); a bottleneck bounds it at
  twice its bandwidth-delay product (a bounded queue, never a collapse); a round trip that
  loses more than 15 % of what it sent, while the smoothed loss rate over rounds is above 15 %
  too, halves the rate estimate (congestion beyond what a lossy link explains); three probe
  timeouts in a row collapse it to the minimum.

One :class:`PathRecovery` per peer outlives the peer's send records (a new record starts from
the RTT and window measured before, not from the initial guesses).
"""

from __future__ import annotations

#: Timer granularity: the smallest variance term of a probe timeout (RFC 9002: 1 ms).
GRANULARITY_S = 0.001
#: A token is lost once one sent this many transmissions after it is acknowledged.
PACKET_THRESHOLD = 3
#: ... or once it is this many (smoothed or latest) RTTs old and a later one is acknowledged.
TIME_THRESHOLD = 9 / 8
#: Spurious retransmissions taken as proof that the path reorders (packet threshold off).
SPURIOUS_FOR_REORDERING = 3
#: Most quarters of extra time threshold after spurious retransmissions (up to 4x).
MAX_REORDER_QUARTERS = 12
#: Losses declared with no spurious retransmission among them after which the widened time
#: threshold narrows by a quarter (RACK's reo_wnd_persist, RFC 8985 6.2: 16 recoveries).
LOSSES_TO_NARROW = 16
#: Consecutive probe timeouts without any acknowledgement taken as persistent congestion.
PERSISTENT_PTOS = 3
#: Before any RTT sample, this many probe timeouts in a row keep the initial timeout; the
#: back-off doubles only after them. What a path without a sample has in flight is a slot
#: request (tens of bytes), no threat to any queue, and its answer needs a datagram through
#: each way: at 35 % loss each way an attempt succeeds with p = 0.42, and with the timeout
#: doubling from the first expiry one first exchange in a hundred took over 10 s. With 10
#: steady probes (2 s at the default 0.2 s) 0.4 % of them need more. A peer that is gone
#: costs 10 small probes more than before, then the usual back-off.
UNSAMPLED_STEADY_PTOS = 10
#: Initial window: min(10 x datagram, max(14720, 2 x datagram)) bytes (RFC 9002, 7.2).
INITIAL_WINDOW_DATAGRAMS = 10
#: The least window: 4 datagrams, as BBR's (a sender, its receiver's turn and the ACK each
#: hold one, and one more to send); on loopback one datagram is a 60 KB BATCH that takes its
#: receiver a few hundred microseconds, and 2 held a batched stream to 1.6-1.7 M msg/s.
MIN_WINDOW_DATAGRAMS = 4
#: The bandwidth estimate keeps the largest recent per-round delivery rate, decaying by this
#: factor each round (a windowed maximum of a few tens of rounds, without the window's memory).
BW_DECAY = 0.95
#: The window is this many bandwidth-delay products (BBR's cwnd gain): room for the delivery
#: rate to grow when the path has more to give, a bounded queue when it has not.
CWND_GAIN = 2.0
#: ACK aggregation (BBR's ``extra_acked``): an aggregation epoch that has acknowledged this
#: many bytes starts again (an old epoch would measure a long-gone burst).
ACK_EPOCH_RESET_BYTES = 1 << 20
#: A round trip that loses more than this share of what it sent is taken as congestion.
LOSS_TOLERANCE = 0.15


class PathRecovery:
    """RTT, probe timeout, loss thresholds and congestion window of the path to one peer.

    Inputs: :meth:`on_rtt_sample`, :meth:`on_acked`, :meth:`on_lost`, :meth:`on_pto`,
    :meth:`on_progress`, :meth:`on_removed_bytes`; the sender adds to :attr:`inflight` itself
    as it sends (the hot path) and compares it with :attr:`cwnd`; it asks :attr:`pto` (with
    back-off) and :meth:`loss_delay`.
    """

    __slots__ = (
        "srtt", "rttvar", "min_rtt", "latest_rtt", "sampled", "initial_pto", "peer_ack_delay",
        "pto_count", "pto", "backoff_cap", "seq", "largest_acked", "packet_threshold",
        "reorder_quarters", "spurious", "losses_since_spurious",
        "mds", "cwnd", "min_window", "inflight", "bw", "round_start", "round_acked",
        "round_lost", "loss_rate", "congestion_events", "cwnd_tokens", "token_bytes",
        "epoch_start", "epoch_acked", "extra_acked", "loaded",
    )

    def __init__(self, initial_pto: float, peer_ack_delay: float, backoff_cap: float,
                 mds: int) -> None:
        self.srtt = 0.0
        self.rttvar = 0.0
        self.min_rtt = float("inf")
        self.latest_rtt = 0.0
        self.sampled = False
        self.initial_pto = initial_pto
        #: The peer's largest ACK delay (it says so in SLOTS; our own until then).
        self.peer_ack_delay = peer_ack_delay
        self.pto_count = 0
        self.backoff_cap = backoff_cap
        self.pto = initial_pto
        #: Transmission sequence: every token transmission takes the next number.
        self.seq = 0
        self.largest_acked = -1
        #: PACKET_THRESHOLD, or "never" once reordering was seen on the path.
        self.packet_threshold = PACKET_THRESHOLD
        self.reorder_quarters = 0  # the time threshold widened by this many quarters
        self.spurious = 0
        self.losses_since_spurious = 0  # loss declarations since the last spurious one
        self.mds = mds
        self.min_window = MIN_WINDOW_DATAGRAMS * mds
        self.cwnd = min(INITIAL_WINDOW_DATAGRAMS * mds, max(14720, self.min_window))
        self.inflight = 0
        self.bw = 0.0  # delivery rate estimate, bytes/s
        self.round_start = -1.0
        self.round_acked = 0
        self.round_lost = 0
        self.loss_rate = 0.0  # smoothed share of what was sent that was declared lost
        self.congestion_events = 0
        #: About how many tokens the measured window holds (by the mean size of those
        #: acknowledged; 0 before a measure): the protocol sizes its per-peer window and slot
        #: requests from it.
        self.token_bytes = 64.0
        self.cwnd_tokens = 0
        #: ACK aggregation: the start of the current epoch, the bytes acknowledged in it, and
        #: the most acknowledged beyond what the delivery rate explains (decaying per round).
        self.epoch_start = 0.0
        self.epoch_acked = 0
        self.extra_acked = 0.0
        #: The peer said it is loaded (a RETRY in the handshake): before a sample, the probe
        #: timeout doubles from the first expiry (the steady tries are for loss, not load).
        self.loaded = False
        self._update_pto()

    # ------------------------------------------------------------------ RTT and timeouts

    def base_pto(self) -> float:
        """The probe timeout without back-off."""
        if not self.sampled:
            return self.initial_pto
        return (self.srtt + max(4 * self.rttvar, GRANULARITY_S) + self.peer_ack_delay)

    def _update_pto(self) -> None:
        base = self.base_pto()
        n = self.pto_count
        if not self.sampled and not self.loaded:
            n = n - UNSAMPLED_STEADY_PTOS if n > UNSAMPLED_STEADY_PTOS else 0
        t = base * (1 << n) if n < 16 else self.backoff_cap
        self.pto = t if t < self.backoff_cap else max(self.backoff_cap, base)

    def on_rtt_sample(self, sample: float) -> None:
        """A round trip measured without ambiguity (a first transmission answered)."""
        if sample < 0:
            return
        self.latest_rtt = sample
        if sample < self.min_rtt:
            self.min_rtt = sample
        if not self.sampled:
            self.sampled = True
            self.srtt = sample
            self.rttvar = sample / 2
        else:
            self.rttvar = 0.75 * self.rttvar + 0.25 * abs(self.srtt - sample)
            self.srtt = 0.875 * self.srtt + 0.125 * sample
        self._update_pto()

    def set_peer_ack_delay(self, delay: float) -> None:
        if delay != self.peer_ack_delay:
            self.peer_ack_delay = delay
            self._update_pto()

    def on_progress(self) -> None:
        """Something was acknowledged (or answered): the back-off ends."""
        if self.pto_count:
            self.pto_count = 0
            self._update_pto()

    def set_loaded(self) -> None:
        """The peer is loaded (see :attr:`loaded`)."""
        if not self.loaded:
            self.loaded = True
            self._update_pto()

    def on_pto(self) -> bool:
        """The probe timeout expired; returns True on persistent congestion."""
        self.pto_count += 1
        self._update_pto()
        if self.pto_count == PERSISTENT_PTOS:
            self.cwnd = self.min_window
            self.cwnd_tokens = 0
            self.bw = 0.0  # the model starts again from the minimum window
            self.extra_acked = 0.0
            self.round_start = -1.0
            self.round_acked = self.round_lost = 0
            self.congestion_events += 1
            return True
        return False

    def on_reordering(self) -> None:
        """A first transmission was acknowledged after a later one: the path reorders."""
        self.packet_threshold = 1 << 62

    def on_spurious(self) -> None:
        """A retransmission turned out needless (the first copy was only late). A few of them
        are evidence of reordering (RACK's use of DSACK): the packet threshold goes, since a
        token overtaken by three later ones was re-sent before its own late copy could show
        the reordering (an ACK lost now and then is repeated by the next ones, so it rarely
        makes a retransmission needless)."""
        self.spurious += 1
        self.losses_since_spurious = 0
        if self.spurious >= SPURIOUS_FOR_REORDERING:
            self.packet_threshold = 1 << 62
        if self.reorder_quarters < MAX_REORDER_QUARTERS:
            self.reorder_quarters += 1

    def loss_delay(self) -> float:
        """How old a token must be, with a later one acknowledged, to be taken as lost."""
        rtt = self.srtt if self.sampled else self.initial_pto
        if self.latest_rtt > rtt:
            rtt = self.latest_rtt
        d = TIME_THRESHOLD * rtt * (1 + self.reorder_quarters / 4)
        return d if d > GRANULARITY_S else GRANULARITY_S

    # ------------------------------------------------------------------ congestion

    def on_removed_bytes(self, nbytes: int) -> None:
        """Tokens left flight without an acknowledgement (voided, abandoned, dropped)."""
        self.inflight -= nbytes
        if self.inflight < 0:
            self.inflight = 0

    def on_acked(self, nbytes: int, now: float, ntokens: int = 1) -> None:
        """``nbytes`` of ``ntokens`` tokens were acknowledged at ``now``."""
        self.token_bytes += 0.125 * (nbytes / ntokens - self.token_bytes)
        self.inflight = self.inflight - nbytes if self.inflight > nbytes else 0
        self.round_acked += nbytes
        bw = self.bw
        if bw > 0:
            # ACK aggregation (BBR's extra_acked): acknowledgements that come in bursts (a
            # receiver that reads many datagrams a turn, a sender whose thread was busy) carry
            # more than the delivery rate explains between them; the window keeps that much
            # more, or it runs dry before the next burst and the path idles. On a short path
            # the bursts are most of the round trip: a 1500-byte veth held the window at 5
            # datagrams and the stream at 14-20 k datagrams/s (docs/performance.md).
            expected = bw * (now - self.epoch_start)
            acked = self.epoch_acked
            if acked <= expected or acked + nbytes >= ACK_EPOCH_RESET_BYTES:
                self.epoch_start = now  # the ACK rate fell to the delivery rate: new epoch
                acked = 0
                expected = 0.0
            acked += nbytes
            self.epoch_acked = acked
            extra: float = acked - expected
            if extra > self.cwnd:
                extra = float(self.cwnd)
            if extra > self.extra_acked:
                self.extra_acked = extra
        if self.round_start < 0:
            self.round_start = now
            return  # the round's clock starts at its first acknowledgement
        span = now - self.round_start
        if span >= (self.srtt if self.srtt > GRANULARITY_S else GRANULARITY_S):
            self._end_round(span, now)

    def _end_round(self, span: float, now: float) -> None:
        """A round trip of acknowledgements: take a delivery-rate sample, answer heavy loss,
        and size the window from the model."""
        rate = self.round_acked / span
        decayed = self.bw * BW_DECAY
        self.bw = rate if rate > decayed else decayed
        self.extra_acked *= BW_DECAY
        lost, acked = self.round_lost, self.round_acked
        self.loss_rate += 0.125 * (lost / (lost + acked) - self.loss_rate)
        if self.loss_rate > LOSS_TOLERANCE and lost > LOSS_TOLERANCE * (lost + acked):
            # More loss, over several rounds, than a lossy link explains: the path is
            # congested. Halve the rate the window is sized from, and measure again.
            self.bw *= 0.5
            self.loss_rate = 0.0
            self.congestion_events += 1
        self.round_start = now
        self.round_acked = self.round_lost = 0
        if self.bw > 0 and self.min_rtt != float("inf"):
            self.cwnd = max(self.min_window,
                            int(CWND_GAIN * self.bw * self.min_rtt + self.extra_acked))
            self.cwnd_tokens = int(self.cwnd / self.token_bytes)

    def on_lost(self, nbytes: int) -> None:
        """``nbytes`` of tokens were declared lost (they are sent again at once). Once
        LOSSES_TO_NARROW declarations passed with no spurious retransmission, a widened time
        threshold narrows by a quarter: a few late copies (a busy host, a burst of jitter)
        do not slow every later recovery for the life of the path; a path that still
        reorders shows it again with its next spurious retransmission."""
        self.round_lost += nbytes
        if self.reorder_quarters:
            self.losses_since_spurious += 1
            if self.losses_since_spurious >= LOSSES_TO_NARROW:
                self.losses_since_spurious = 0
                self.reorder_quarters -= 1

    def snapshot(self) -> dict[str, float]:
        """Diagnostics (seconds, bytes, bytes/s)."""
        return {"srtt_s": self.srtt, "rttvar_s": self.rttvar,
                "min_rtt_s": self.min_rtt if self.min_rtt != float("inf") else 0.0,
                "pto_s": self.pto, "pto_count": self.pto_count, "cwnd": self.cwnd,
                "inflight": self.inflight, "bandwidth_Bps": self.bw,
                "extra_acked": self.extra_acked, "peer_ack_delay_s": self.peer_ack_delay, "spurious": self.spurious,
                "reordering": self.packet_threshold != PACKET_THRESHOLD,
                "time_threshold_quarters": self.reorder_quarters,
                "loss_rate": self.loss_rate,
                "congestion_events": self.congestion_events}
