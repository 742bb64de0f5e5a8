"""Pacing (exon/recovery.py, BBR's): the pacer's bucket, its gains, and what it holds back.

The arithmetic first (a :class:`PathRecovery` fed acknowledgements on a virtual clock), then
two protocols on a 10 ms path (``DelayedNet``): a window leaves in quanta spread over the
round trip, not in one burst; what is not new data (ACKs, slot requests, retransmissions)
is never held; the protocol's deadline says when the pacer releases the rest, and nothing
is waiting to be sent meanwhile (a driver sleeps, it does not spin).
"""

from __future__ import annotations

import pytest

from a3m.exon import ExonConfig, wire
from a3m.exon.recovery import (
    CRUISE,
    CYCLE_GAINS,
    DRAIN,
    DRAIN_GAIN,
    FULL_BW_ROUNDS,
    PACING_QUANTUM_DATAGRAMS,
    PACING_QUANTUM_S,
    STARTUP,
    STARTUP_GAIN,
    PathRecovery,
)

from .delayed import DelayedNet

MDS = 1400
RTT_S = 0.010
RATE = 12_500_000.0  # bytes/s: 100 Mbit/s


def measured(rate: float = RATE, rounds: int = 1, rtt: float = RTT_S,
             pacing: bool = True) -> tuple[PathRecovery, float]:
    """A path with an RTT sample and ``rounds`` rounds delivering ``rate``; (path, now)."""
    path = PathRecovery(0.2, 0.002, 60.0, MDS, pacing=pacing)
    path.on_rtt_sample(rtt)
    now = 1.0
    path.on_acked(0, now)  # the first round's clock starts
    step = max(rtt, 0.001)  # (a round lasts the RTT, at least the timer granularity)
    for _ in range(rounds):
        now += step
        path.on_acked(int(rate * step), now)
    return path, now


def test_nothing_is_paced_before_an_rtt_sample() -> None:
    path = PathRecovery(0.2, 0.002, 60.0, MDS)
    assert path.pacing_rate == 0
    assert path.pace_allowance(5.0, MDS) == float("inf")
    path.paced(10 * MDS, 5.0)
    assert path.pace_allowance(5.0, MDS) == float("inf")  # the first window goes at once


def test_a_path_under_a_quantum_of_round_trip_is_not_paced() -> None:
    """On loopback or a LAN the whole window leaves within one quantum anyway: no pacer, so
    no timer wake-ups (the fast path stays as it was)."""
    path, now = measured(rtt=0.0005, rounds=3)
    assert path.bw > 0 and path.pacing_rate == 0
    assert path.pace_allowance(now, MDS) == float("inf")


def test_pacing_off_keeps_the_window_alone() -> None:
    path, now = measured(pacing=False, rounds=3)
    assert path.bw > 0 and path.pacing_rate == 0
    assert path.pace_allowance(now, MDS) == float("inf")


def test_the_bucket_releases_whole_datagrams_up_to_a_quantum_then_waits() -> None:
    path, now = measured()
    rate = path.pacing_rate
    assert rate >= STARTUP_GAIN * path.bw * 0.999
    quantum = rate * path.pace_burst_s
    assert path.pace_burst_s == max(PACING_QUANTUM_S, PACING_QUANTUM_DATAGRAMS * MDS / rate)
    # A full bucket: a quantum's worth, in whole datagrams.
    allowed = path.pace_allowance(now, MDS)
    assert allowed % MDS == 0 and quantum - MDS < allowed <= quantum
    path.paced(int(allowed), now)
    assert path.pace_allowance(now, MDS) == 0  # spent: wait
    wake = path.pace_wake()
    assert now < wake <= now + path.pace_burst_s
    assert path.pace_allowance(wake - 1e-6, MDS) < quantum / 2
    at_wake = path.pace_allowance(wake, MDS)
    assert quantum / 2 - MDS <= at_wake <= quantum / 2  # half a quantum, whole datagrams
    # Released at every wake-up for a second, the bytes follow the rate (not a burst more).
    sent = 0.0
    t = wake
    for _ in range(100_000):
        if t >= now + 1.0:
            break
        n = path.pace_allowance(t, MDS)
        assert n > 0
        path.paced(int(n), t)
        sent += int(n)
        t = path.pace_wake()
    assert rate * (1.0 - path.pace_burst_s) <= sent + allowed <= rate * 1.0 + quantum


def test_a_late_wake_up_finds_at_most_a_quantum() -> None:
    """A driver that comes back late (asyncio's millisecond) finds the bucket full, never
    more than a quantum: the burst stays bounded."""
    path, now = measured()
    path.paced(int(path.pace_allowance(now, MDS)), now)
    late = path.pace_wake() + 1.0
    assert path.pace_allowance(late, MDS) <= path.pacing_rate * path.pace_burst_s


def test_time_lost_to_a_late_sender_is_made_up_a_quantum_at_a_time() -> None:
    """Tokens wait, and the sender comes back 3 ms after the wake-up it asked for (a Python
    thread that did not get the interpreter): the full bucket overflowed for 2.5 ms, time
    the path went unused. The pacer makes it up at 1.25x the rate, never more than a
    quantum at once, up to a quarter of a round trip of it (here 2.5 ms). Without it a
    sender whose turns come milliseconds apart kept 0.8 of the rate on the emulated path."""
    path, now = measured()
    rate = path.pacing_rate
    quantum = rate * path.pace_burst_s
    path.paced(int(path.pace_allowance(now, MDS)), now)
    t = path.pace_wake() + 0.003  # late
    start = t
    sent = 0
    for _ in range(100_000):
        if t >= start + 0.1:
            break
        n = path.pace_allowance(t, MDS)
        assert n <= quantum
        path.paced(int(n), t)
        sent += int(n)
        t = path.pace_wake()  # on time from now on
    assert path.pace_late_s == pytest.approx(0.003 - path.pace_burst_s / 2, rel=0.01)
    owed = min(path.pace_late_s, 0.25 * path.srtt)
    assert path.pace_owed_s == 0  # made up
    assert sent >= rate * (0.1 + 0.9 * owed)  # the rate, and most of the time owed
    assert sent <= rate * (0.1 + owed) + quantum


def test_startup_then_drain_then_the_cruise_cycle() -> None:
    """Startup paces at 2.885 x the estimate while the delivery rate grows by a quarter a
    round; FULL_BW_ROUNDS rounds without that end it; drain paces at 1/2.885 until what is
    in flight fits the path; then one round each of 1.25, 0.75 and six of 1."""
    path, now = measured()
    assert path.phase == STARTUP
    for _ in range(FULL_BW_ROUNDS):  # the same rate: the pipe is full
        assert path.phase == STARTUP
        now += RTT_S
        path.inflight = 4 * int(RATE * RTT_S)  # a queue built up (startup's)
        path.on_acked(int(RATE * RTT_S), now)
    assert path.phase == DRAIN
    assert path.pacing_rate == pytest.approx(max(DRAIN_GAIN * path.bw,
                                                 path.min_window / path.srtt))
    now += RTT_S
    path.inflight = int(RATE * RTT_S) // 2  # drained
    path.on_acked(int(RATE * RTT_S), now)
    assert path.phase == CRUISE
    gains = []
    for _ in range(2 * len(CYCLE_GAINS)):
        gains.append(round(path.pacing_rate / path.bw, 3))
        now += RTT_S
        path.on_acked(int(RATE * RTT_S), now)
    assert gains[:len(CYCLE_GAINS)] == gains[len(CYCLE_GAINS):]  # a cycle
    assert sorted(gains[:len(CYCLE_GAINS)]) == sorted(CYCLE_GAINS)
    assert gains[0] == 1.0  # (cruise first: the drain just emptied the queue)


def test_startup_paces_at_least_the_window_per_round_trip() -> None:
    """The estimate lags a round; startup spreads the window over the RTT, never slower."""
    path = PathRecovery(0.2, 0.002, 60.0, MDS)
    path.on_rtt_sample(RTT_S)
    assert path.bw == 0 and path.phase == STARTUP
    assert path.pacing_rate == pytest.approx(path.cwnd / path.srtt)


def test_an_application_limited_round_does_not_lower_the_estimate() -> None:
    """A quiet application (the sender's queue ran dry) must not make a later burst crawl at
    the rate it used: such a round's delivery rate only raises the estimate (BBR's rule)."""
    path, now = measured(rounds=2)
    bw = path.bw
    for _ in range(30):
        now += RTT_S
        path.app_limited = True  # (the sender sets it when its queue runs dry)
        path.on_acked(int(RATE * RTT_S / 10), now)
    assert path.bw == bw
    now += RTT_S
    path.app_limited = True
    path.on_acked(int(2 * RATE * RTT_S), now)
    assert path.bw == pytest.approx(2 * RATE, rel=0.01)  # a higher one counts


def test_the_estimate_holds_the_best_of_ten_rounds_then_follows_the_path() -> None:
    """Paced at the estimate, a lossy round measures less than the path gives: the estimate
    keeps the best rate of the last 10 rounds (a 5 % decay a round took it down by a quarter
    between two probes at 5 % random loss), then follows a path that really slowed down."""
    path, now = measured(rounds=1)
    for i in range(9):
        now += RTT_S
        path.on_acked(int(0.95 * RATE * RTT_S), now)
        assert path.bw == pytest.approx(RATE, rel=0.01), i
    for _ in range(3):
        now += RTT_S
        path.on_acked(int(0.5 * RATE * RTT_S), now)
    assert path.bw == pytest.approx(0.95 * RATE, rel=0.01)  # the first has gone
    for _ in range(10):
        now += RTT_S
        path.on_acked(int(0.5 * RATE * RTT_S), now)
    assert path.bw == pytest.approx(0.5 * RATE, rel=0.01)


def test_acks_in_bursts_measure_no_more_than_was_sent() -> None:
    """A busy receiver acknowledges in bursts: a round can carry more ACKs than a round's
    worth. The sample is bounded by the send rate (BBR's send interval): above the path's
    rate the pacer kept a standing queue at the bottleneck (10-15 ms on the emulated 10 ms
    path, where the estimate read 13-15 MB/s for a 12 MB/s link)."""
    path, now = measured(rounds=1)
    for i in range(5):
        path.paced(int(RATE * RTT_S), now)  # a round's worth sent...
        now += RTT_S
        # ...and the round after it, 1.6 rounds' worth acknowledged
        path.on_acked(int((1.6 if i else 1.0) * RATE * RTT_S), now)
    assert path.bw == pytest.approx(RATE, rel=0.01)


def test_three_probe_timeouts_start_the_model_and_the_pacer_again() -> None:
    path, now = measured(rounds=5)
    for _ in range(3):
        path.on_pto()
    assert path.phase == STARTUP and path.bw == 0 and not path.bw_samples
    assert path.pacing_rate == pytest.approx(path.cwnd / path.srtt)  # the least window


# ---------------------------------------------------------------------- two protocols


Log = list[tuple[float, str, list[wire.Frame]]]


def stream_net(pacing: bool = True) -> tuple[DelayedNet, Log]:
    """a -> b on a 10 ms path, the path measured by a first stream (its RTT and delivery
    rate), then quiet: the next burst finds the pacer's bucket full. Returns the net and
    the log of the datagrams sent from then on: (time, source, frames)."""
    net = DelayedNet("a", "b", one_way_s=RTT_S / 2,
                     config=ExonConfig(secure=False, pacing=pacing))
    log: Log = []

    def record(src: str, dst: str, frames: list[wire.Frame], now: float) -> bool:
        log.append((now, src, frames))
        return False

    net.drop = record
    for i in range(2000):  # enough rounds for a delivery rate
        net.send("a", "b", b"w%05d" % i + b"." * 1000)
        net.run(0.0002)
    assert net.run(2.0, lambda: not net.nodes["a"]._sr["b"].tokens)
    net.run(0.5)  # quiet
    log.clear()
    return net, log


def burst(net: DelayedNet, n: int, tag: bytes) -> None:
    for i in range(n):
        net.nodes["a"].send("b", tag + b"%05d" % i + b"." * 1000, net.now)


def burst_profile(pacing: bool) -> tuple[dict[float, int], float, PathRecovery]:
    """A burst of 400 x 1 KB from a measured path: (bytes of tokens sent at each instant,
    when the burst began, the path)."""
    net, log = stream_net(pacing)
    path = net.nodes["a"]._sr["b"].path
    t0 = net.now
    burst(net, 400, b"b")
    net._flush()
    assert net.run(5.0, lambda: sum(d[3][:1] == b"b" for d in net.delivered) == 400)
    per_instant: dict[float, int] = {}
    for t, src, frames in log:
        if src == "a":
            n = sum(wire.TOKEN_OVERHEAD + len(f[3]) for f in frames if f[0] == wire.TOKEN)
            if n:
                per_instant[t] = per_instant.get(t, 0) + n
    return per_instant, t0, path


def test_a_window_leaves_in_quanta_spread_over_the_round_trip() -> None:
    """Paced, no instant carries more than a quantum (and a datagram), and the burst takes
    about its bytes over the pacing rate; unpaced, the window leaves at once."""
    paced, t0, path = burst_profile(True)
    assert path.pacing_rate > 0
    quantum = path.pacing_rate * path.pace_burst_s
    assert max(paced.values()) <= quantum + MDS, (max(paced.values()), quantum)
    assert len(paced) >= 10  # released at many instants
    assert max(paced) - t0 >= 0.5 * 400 * 1000 / path.pacing_rate
    unpaced, _, path = burst_profile(False)
    assert path.pacing_rate == 0
    assert max(unpaced.values()) >= 3 * max(paced.values())  # the window, in one burst


def test_while_the_pacer_holds_tokens_the_deadline_is_its_release_and_nothing_waits() -> None:
    """What the pacer holds back is not output (a driver does not spin on it); the protocol's
    next deadline is when it is released, within a quantum."""
    net, _ = stream_net()
    a = net.nodes["a"]
    rec = a._sr["b"]
    burst(net, 400, b"h")
    assert rec.queue  # held back
    assert a.datagrams_to_send(net.now)  # the first quantum leaves
    assert not a.has_output()
    t = a.next_timer()
    assert t is not None and net.now < t <= net.now + rec.path.pace_burst_s
    a.handle_timer(t)
    assert a.has_output()  # released at its deadline
    assert rec.queue  # (and the rest is still held)


def test_retransmissions_and_acks_are_not_held() -> None:
    """With the pacer's bucket empty, a probe's retransmission leaves at once, and so do the
    receiver's ACKs (only new tokens are paced)."""
    net, _ = stream_net()
    a, b = net.nodes["a"], net.nodes["b"]
    rec = a._sr["b"]
    path = rec.path
    burst(net, 10, b"r")
    a.datagrams_to_send(net.now)
    assert rec.tokens and not rec.queue
    path.paced(10**7, net.now)  # the bucket deep in debt (a second of sending at the rate)
    first = next(iter(rec.tokens))
    due = rec.last_sent + path.pto
    assert path.pace_allowance(due, MDS) == 0
    a.handle_timer(due)  # the probe timeout: its copies go, the bucket notwithstanding
    assert rec.tokens[first][4] == 2
    out = a.datagrams_to_send(due)
    copies = [f for d, _ in out for f in wire.decode_datagram(d)[2]
              if f[0] == wire.TOKEN and f[7] & wire.FLAG_RETRANSMIT]
    assert copies
    b.receive_datagram(out[0][0], "a", due + RTT_S / 2)  # a copy b has: a duplicate
    acks = b.datagrams_to_send(due + RTT_S / 2)
    assert any(f[0] == wire.ACK for d, _ in acks for f in wire.decode_datagram(d)[2])
