"""Loss recovery and congestion control for the path to one peer, without I/O.

On the lines of QUIC's (RFC 9002), with Exon's slots in the role of packet numbers; the
argument and the constants are in ``docs/exon-wire.md`` ("Loss recovery"):

- **RTT**: smoothed RTT and variance (RFC 6298 weights), minimum RTT, latest sample. Samples
  come from first transmissions; from a token sent again when the ACK's copy ranges (wire
  version 5) say which copy arrived (only the first: that copy's time; the one copy sent
  again: its own); never from a token sent three times or more or an ACK that does not say
  (Karn's rule); from SLOTS answering the REQSLOTS copy it echoes; and, as a lower bound,
  from an ACK of resent tokens only whose newest copy left longer ago than the probe
  timeout (a round trip that grew past the timeout, a loaded receiver's queue, is otherwise
  never measured again). One sample per datagram read (its ACK frames are one ACK).
- **Probe timeout** = srtt + max(4 rttvar, granularity) + the peer's largest ACK delay,
  doubled on each consecutive expiry and back to its base on any acknowledged progress;
  before any sample, the initial timeout, held for ``UNSAMPLED_STEADY_PTOS`` expiries
  before it doubles, unless the peer said it is loaded (a RETRY in the handshake: the
  back-off then doubles from the first expiry, as load is not loss).
- **Loss detection**: a token is lost when one sent 3 transmissions later was acknowledged
  (packet threshold), or when one sent later was acknowledged and it is older than 9/8 of
  max(srtt, latest RTT) (time threshold). A token acknowledged whose first copy is what
  arrived credits the first copy's transmission number, never the later copy's (that number
  would make every token sent between the two look overtaken: the spurious fast
  retransmissions of issue 31). Once the path shows reordering (a first transmission
  acknowledged after a later one, or three tokens declared lost whose first copy arrived:
  RACK's DSACK, RFC 8985), only the time threshold is used, and each such needless
  retransmission widens it by a quarter, up to 4x. The protocol scans its tokens; this
  object keeps the transmission sequence, the largest acknowledged one and the thresholds.
- **Congestion control**, model-based on BBR's lines: the window is 2 x the largest recent
  delivery rate x the minimum RTT (at least 2 datagrams; 10 before any measure). While the
  path delivers more than before, the window doubles each round trip (a slow start); random
  loss, which Exon exists to survive, barely moves it (NewReno would halve it at every loss,
  and at 5 % loss hold a stream to a few datagrams per round trip); a bottleneck bounds it at
  twice its bandwidth-delay product (a bounded queue, never a collapse); a round trip that
  loses more than 15 % of what it sent, while the smoothed loss rate over rounds is above 15 %
  too, halves the rate estimate (congestion beyond what a lossy link explains; paced, only
  with a queue standing, and in startup or drain it ends startup instead: those losses are
  startup's own overshoot); three probe timeouts in a row collapse it to the minimum.
- **Pacing**, BBR's: new tokens leave at a pacing rate, gain x the delivery-rate estimate, and
  the window is only a cap; without it a window leaves in one burst, and a shallow queue at a
  bottleneck drops most of it. The gain is 2.89 while the delivery rate still grows by a
  quarter a round (startup, as a slow start; the model's first rate is the window over the
  smoothed RTT), 1/2.89 for the rounds that drain the queue startup built, then a cycle of
  one round each of 1.25 (probe for more), 0.75 (drain what the probe queued) and six of 1.
  A token bucket holds up to a quantum (1 ms at the pacing rate, or 4 datagrams), so bursts
  that small leave at once and a late timer loses nothing. Not paced: ACKs and control
  frames, retransmissions, anything before an RTT sample, and paths whose least RTT is below
  the quantum (there a whole window fits in one quantum: pacing would only add wake-ups). A
  round in which the sender ran out of queued tokens is application-limited: its delivery
  rate only raises the estimate, and the estimate does not decay (BBR's rule: a quiet
  application must not make a later burst crawl at the rate it used).

One :class:`PathRecovery` per peer outlives the peer's send records (a new record starts from
the RTT and window measured before, not from the initial guesses).
"""

from __future__ import annotations

INF = float("inf")

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
#: Pacing gains (BBR's): startup (2 / ln 2, the least that doubles the delivery rate each
#: round), drain (its inverse), and the cruise cycle, one round each (probe, drain, cruise).
STARTUP_GAIN = 2.885
DRAIN_GAIN = 1 / STARTUP_GAIN
CYCLE_GAINS = (1.25, 0.75, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0)
#: Startup ends after this many rounds in a row without the delivery rate growing by a
#: quarter (the pipe is full).
FULL_BW_GROWTH = 1.25
FULL_BW_ROUNDS = 3
#: The pacer's bucket: this much time at the pacing rate, or this many datagrams if more,
#: leaves at once (Linux's fq and BBR allow ~1 ms bursts); a path whose least RTT is below
#: the time is not paced at all.
PACING_QUANTUM_S = 0.001
PACING_QUANTUM_DATAGRAMS = 4
#: With pacing, the bandwidth estimate is the largest delivery rate of this many rounds (BBR's
#: windowed maximum, longer than the gain cycle: the probe round's rate holds through it);
#: without, it decays by BW_DECAY a round. A decay as fast as the path's random loss (5 % a
#: round) took the estimate, and the pacing rate with it, down by a quarter between probes.
BW_WINDOW_ROUNDS = 10
#: Paced, heavy loss is taken as congestion only while the smoothed RTT is this many least
#: RTTs or more (a queue standing at the bottleneck): without one it is the link's.
QUEUED_RTT = 1.125
#: A sender that came back too late for its paced tokens makes the lost time up at this
#: gain (pace_allowance).
CATCH_UP_GAIN = 1.25
#: Phases of the pacing gain.
STARTUP, DRAIN, CRUISE = 0, 1, 2


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
        "pacing_allowed", "pacing", "pacing_rate", "pace_at", "pace_burst_s", "phase", "cycle",
        "full_bw", "full_bw_rounds", "app_limited", "bw_samples", "sent", "round_sent",
        "send_rate", "pace_late_s", "pace_wake_at", "pace_owed_s",
    )

    def __init__(self, initial_pto: float, peer_ack_delay: float, backoff_cap: float,
                 mds: int, pacing: bool = True) -> None:
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
        #: Pacing: allowed (the config's choice); on for this path (allowed, and its least
        #: RTT a quantum or more: the rate-based model's rules apply only then, elsewhere
        #: the window works as it did); the rate in bytes/s (0: not paced now); and the
        #: bucket as the time its debt is paid: a token may leave while ``pace_at <= now``;
        #: each one moves it on by its bytes over the rate, from no earlier than
        #: ``now - pace_burst_s`` (a full bucket).
        self.pacing_allowed = pacing
        self.pacing = False
        self.pacing_rate = 0.0
        self.pace_at = 0.0
        self.pace_burst_s = PACING_QUANTUM_S
        self.pace_late_s = 0.0  # time the bucket overflowed while tokens waited (diagnostics)
        self.pace_wake_at = 0.0  # the wake-up asked for while tokens wait (0: none)
        self.pace_owed_s = 0.0  # time the path went unused that the pacer makes up
        self.phase = STARTUP
        self.cycle = 0
        self.full_bw = 0.0  # startup: the rate the next rounds must beat by a quarter
        self.full_bw_rounds = 0
        #: The sender ran out of queued tokens this round (set by the sender).
        self.app_limited = False
        #: With pacing: the delivery rates of the last BW_WINDOW_ROUNDS rounds that count;
        #: bytes sent so far (new tokens and fast retransmissions), at the round's start,
        #: and the send rate of the last round.
        self.bw_samples: list[float] = []
        self.sent = 0
        self.round_sent = 0
        self.send_rate = 0.0
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
        if self.pacing_allowed:
            self.pacing = self.min_rtt >= PACING_QUANTUM_S
            self._set_pacing_rate()

    def set_peer_ack_delay(self, delay: float) -> None:
        if delay != self.peer_ack_delay:
            self.peer_ack_delay = delay
            self._update_pto()

    def on_progress(self) -> None:
        """Something was acknowledged (or answered): the back-off ends."""
        if self.pto_count:
            self.pto_count = 0
            self._update_pto()

    def seed_pto(self, handshake_rtt: float) -> None:
        """Before any sample: the handshake's round trip to the peer (``handshake_rtt``, a
        lower bound: from the newest copy of the HELLO) raises the probe timeout to what a first sample of it would give (QUIC's PTO after
        one sample: 3 x RTT + the peer's ACK delay), never below the initial guess. A
        responder whose queue made its handshake take a second must not be probed every
        0.2 s (10 000 producers did: 21 761 probe timeouts while linking). Not a sample:
        the least RTT and the rate model wait for Exon's own."""
        if self.sampled or handshake_rtt <= 0:
            return
        seeded = 3 * handshake_rtt + self.peer_ack_delay
        if seeded > self.initial_pto:
            self.initial_pto = seeded
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
            self.bw_samples.clear()
            self.extra_acked = 0.0
            self.round_start = -1.0
            self.round_acked = self.round_lost = 0
            self.congestion_events += 1
            self.phase = STARTUP
            self.full_bw = 0.0
            self.full_bw_rounds = 0
            if self.pacing:
                self._set_pacing_rate()
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
        size the window from the model, and move the pacing gain on."""
        rate = self.round_acked / span
        pacing = self.pacing
        app_limited = pacing and self.app_limited
        if not pacing:
            decayed = self.bw * BW_DECAY
            self.bw = rate if rate > decayed else decayed
        else:
            # Never more than was sent a round before (what these ACKs answer): ACKs that
            # come in bursts (a receiver's turn, a sender's thread busy) carry more than a
            # round's worth into one round (BBR bounds its rate samples by the send interval
            # the same way); paced above the path's rate, a standing queue builds at the
            # bottleneck.
            bound = self.send_rate
            self.send_rate = (self.sent - self.round_sent) / span
            self.round_sent = self.sent
            if rate > bound > 0:
                rate = bound
            if not app_limited or rate > self.bw:
                # (an application-limited round only raises the estimate: BBR's rule)
                samples = self.bw_samples
                samples.append(rate)
                if len(samples) > BW_WINDOW_ROUNDS:
                    del samples[0]
                self.bw = max(samples)
        self.extra_acked *= BW_DECAY
        lost, acked = self.round_lost, self.round_acked
        self.loss_rate += 0.125 * (lost / (lost + acked) - self.loss_rate)
        heavy = lost > LOSS_TOLERANCE * (lost + acked)
        if (self.loss_rate > LOSS_TOLERANCE and heavy
                and (not pacing or self.srtt > QUEUED_RTT * self.min_rtt)):
            # More loss, over several rounds, than a lossy link explains: the path is
            # congested. Halve the rate the window is sized from, and measure again. (Paced,
            # only with a queue standing: at the pacing rate a path with no queue loses what
            # its link loses, and the estimate would not grow back between probes.)
            if pacing and self.phase <= DRAIN:
                # Startup found the limit: its rate samples are the bottleneck's (bounded
                # by what was delivered), the queue is its own 2.89x gain's, which drain
                # empties; the losses drain's rounds declare are still startup's overshoot.
                # Halving as well left the estimate at half the path's for some 30 rounds
                # (BBR: loss ends startup, it does not cut the estimate).
                self.phase = DRAIN
            else:
                self.bw *= 0.5
                if pacing:
                    self.bw_samples[:] = [self.bw]
            self.loss_rate = 0.0
            self.congestion_events += 1
        self.round_start = now
        self.round_acked = self.round_lost = 0
        self.app_limited = False
        if self.bw > 0 and self.min_rtt != float("inf"):
            self.cwnd = max(self.min_window,
                            int(CWND_GAIN * self.bw * self.min_rtt + self.extra_acked))
            self.cwnd_tokens = int(self.cwnd / self.token_bytes)
        if pacing:
            self._next_phase(app_limited, heavy)
            self._set_pacing_rate()

    # ------------------------------------------------------------------ pacing

    def _next_phase(self, app_limited: bool, heavy_loss: bool) -> None:
        """At the end of a round: startup ends when the pipe is full: the rate stopped
        growing for FULL_BW_ROUNDS rounds (not limited by the application), or for one round
        that lost more than LOSS_TOLERANCE (a shallow queue overflowing: each more round at
        2.89x would drop most of what it sent; loss alone does not end it, a lossy link must
        not stop the search while the rate still grows); drain ends once what is in flight
        fits the path's bandwidth-delay product; the cruise cycle moves on a round."""
        if self.phase == STARTUP:
            if self.bw >= FULL_BW_GROWTH * self.full_bw:
                self.full_bw = self.bw  # (growth counts even in an application-limited round)
                self.full_bw_rounds = 0
            elif heavy_loss:
                self.phase = DRAIN
            elif not app_limited:
                self.full_bw_rounds += 1
                if self.full_bw_rounds >= FULL_BW_ROUNDS:
                    self.phase = DRAIN
        if self.phase == DRAIN:
            if self.inflight <= self.bw * self.min_rtt:
                self.phase = CRUISE
                self.cycle = 2  # (cruise first: the drain just emptied the queue)
        elif self.phase == CRUISE:
            self.cycle = (self.cycle + 1) % len(CYCLE_GAINS)

    def _set_pacing_rate(self) -> None:
        """The pacing rate from the model and the phase (0: not paced)."""
        if not self.pacing:
            rate = 0.0  # no RTT yet, or a path whose whole window fits in one quantum
        else:
            phase = self.phase
            gain = (STARTUP_GAIN if phase == STARTUP else DRAIN_GAIN if phase == DRAIN
                    else CYCLE_GAINS[self.cycle])
            rate = gain * self.bw
            if phase == STARTUP:
                # At least the window per smoothed RTT: the rate estimate lags a round (it
                # is measured as the ACKs come back), and startup must grow as fast as the
                # window does: the window is spread over the round trip, not held back.
                floor = self.cwnd / self.srtt
                if floor > rate:
                    rate = floor
            floor = self.min_window / self.srtt  # never slower than the least window
            if floor > rate:
                rate = floor
        if rate <= 0:
            self.pacing_rate = 0.0
            self.pace_at = 0.0  # nothing held back
            return
        self.pacing_rate = rate
        burst = PACING_QUANTUM_DATAGRAMS * self.mds / rate
        self.pace_burst_s = burst if burst > PACING_QUANTUM_S else PACING_QUANTUM_S

    def pace_allowance(self, now: float, unit: int) -> float:
        """Bytes of new tokens the pacer lets leave at ``now``: the whole datagrams (of
        ``unit`` bytes of frames) its bucket holds, so that paced releases fill their
        datagrams (0: wait until :meth:`pace_wake`); unbounded when not paced."""
        rate = self.pacing_rate
        if not rate:
            return INF
        floor = now - self.pace_burst_s
        at = self.pace_at
        if self.pace_wake_at:
            self.pace_wake_at = 0.0
            if at < floor:
                # Tokens waited and the sender came back too late for them (its runtime's
                # turns came milliseconds apart: a Python thread producing holds the
                # interpreter, a loaded CPU): what overflowed the full bucket is time the
                # path went unused. It is made up at CATCH_UP_GAIN x the rate (never more
                # than a quantum at once), up to a quarter of a round trip of it: a
                # standing queue a deep buffer takes, and a shallow one mostly too.
                over = floor - at
                self.pace_late_s += over
                owed = self.pace_owed_s + over
                cap = 0.25 * self.srtt
                self.pace_owed_s = owed if owed < cap else cap
        credit = (now - (at if at > floor else floor)) * rate
        return credit - credit % unit if credit >= unit else 0.0

    def paced(self, nbytes: int, now: float) -> None:
        """``nbytes`` of new tokens left at ``now``: the bucket pays for them."""
        rate = self.pacing_rate
        if rate:
            self.sent += nbytes
            floor = now - self.pace_burst_s
            at = self.pace_at
            t = nbytes / rate
            owed = self.pace_owed_s
            if owed > 0:  # catching up (pace_allowance): the bucket pays 1/CATCH_UP_GAIN
                saved = t * (1 - 1 / CATCH_UP_GAIN)
                if saved > owed:
                    saved = owed
                self.pace_owed_s = owed - saved
                t -= saved
            self.pace_at = (at if at > floor else floor) + t

    def pace_wake(self) -> float:
        """When a sender the pacer held back comes back: once the bucket holds half a
        quantum (a wake-up sends a few datagrams, not one; a timer late by up to half a
        quantum, asyncio's millisecond, loses nothing)."""
        t = self.pace_at + 0.5 * self.pace_burst_s
        self.pace_wake_at = t
        return t

    def on_lost(self, nbytes: int) -> None:
        """``nbytes`` of tokens were declared lost (they are sent again at once). Once
        LOSSES_TO_NARROW declarations passed with no spurious retransmission, a widened time
        threshold narrows by a quarter: a few late copies (a busy host, a burst of jitter)
        do not slow every later recovery for the life of the path; a path that still
        reorders shows it again with its next spurious retransmission."""
        self.round_lost += nbytes
        self.sent += nbytes  # (sent again at once, unpaced: the next new tokens wait for it)
        if self.pacing_rate:
            self.pace_at += nbytes / self.pacing_rate
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
                "congestion_events": self.congestion_events,
                "pacing_Bps": self.pacing_rate, "pacing_phase": self.phase,
                "pacing_late_s": self.pace_late_s}
