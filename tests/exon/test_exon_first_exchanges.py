"""First exchanges at scale (issue 32): a node starting thousands of them sends a bounded rate
of probes (the node-wide pace, ``a3m.exon.pacer``) while a lone link keeps its 0.2 s tries;
a round trip longer than the probe timeout is still measured (any REQSLOTS copy's answer is
a sample); what a handshake held leaves once and counts from then; a repeated HELLO costs no
second key exchange. Sans-I/O on virtual clocks: counts, never timings."""

from __future__ import annotations

import dataclasses

import pytest

from a3m.exon import ExonConfig
from a3m.exon.pacer import FirstProbePacer
from a3m.exon.secure.state import WELCOME_REPEAT_S

from .secure_net import SecureNet


def test_the_pacer_gives_a_burst_then_one_slot_per_interval() -> None:
    pacer = FirstProbePacer(rate=100.0, burst_s=0.1)
    slots = [pacer.slot(5.0) for _ in range(40)]
    assert slots[:11] == [5.0] * 11  # the burst: a tenth of a second's worth, and one
    assert slots[11:] == pytest.approx([5.0 + 0.01 * k for k in range(1, 30)])
    assert pacer.deferred == 29
    now = 1.0  # (the pacer is handed the time: a virtual clock here)
    assert FirstProbePacer(rate=0.0).slot(now) == now  # no pace: never deferred
    held = pacer.admit(0.0, 5.0, grace=0.2)  # the schedule is full at 5.0: a slot is reserved
    assert held > 5.0
    assert pacer.admit(held, 5.0, grace=0.2) == held  # kept, not reserved again
    assert pacer.admit(held, held, grace=0.2) == 0.0  # its slot came: it goes


def _silent_peers(n: int, secure: bool, rate: float, seconds: float = 2.0) -> dict[str, int]:
    """One node sends a message to each of ``n`` peers that never answer; returns its counts
    after ``seconds`` (every datagram it sent is a first transmission or a probe)."""
    cfg = ExonConfig(secure=secure, first_probe_rate=rate)
    net = SecureNet("a", config=cfg)
    a = net.nodes["a"]
    for i in range(n):
        a.associate(f"p{i}", f"nowhere@{i}")
        a.send(f"p{i}", b"hello", net.now)
    net.flush()
    net.run(seconds)
    st = a.stats
    return {"datagrams_out": st.datagrams_out, "hello_resends": st.hello_resends,
            "probe_timeouts": st.probe_timeouts, "deferred": st.probes_deferred}


@pytest.mark.parametrize("secure", [True, False], ids=["secure", "clear"])
def test_thousands_of_first_exchanges_probe_at_the_node_wide_rate(secure: bool) -> None:
    """400 first exchanges with silent peers: each would be tried every 0.2 s (4 000 tries in
    2 s, the first-exchange storm); the node's pace (200 a second) bounds them to ~420."""
    n, seconds = 400, 2.0
    paced = _silent_peers(n, secure, rate=200.0, seconds=seconds)
    tries = paced["hello_resends"] if secure else paced["probe_timeouts"]
    # Counted over `seconds` of the simulator's virtual clock (net.run), not of this machine:
    # the pace's rate x that time, and its burst (a tenth of a second's worth, and one).
    rate = 200.0
    assert tries <= rate * seconds + rate * 0.1 + 1, paced
    assert paced["deferred"] > 0
    firsts = n  # the HELLOs, or the REQSLOTS, that opened each exchange
    assert paced["datagrams_out"] <= firsts + 2 * tries, paced  # (a probe: two datagrams)
    unpaced = _silent_peers(n, secure, rate=0.0, seconds=seconds)
    assert (unpaced["hello_resends"] if secure else unpaced["probe_timeouts"]) >= 8 * n


@pytest.mark.parametrize("secure", [True, False], ids=["secure", "clear"])
def test_a_lone_first_exchange_keeps_its_fast_tries(secure: bool) -> None:
    got = _silent_peers(1, secure, rate=200.0, seconds=2.05)
    tries = got["hello_resends"] if secure else got["probe_timeouts"]
    assert tries == 10 and got["deferred"] == 0, got


def test_a_round_trip_longer_than_the_probe_timeout_is_measured() -> None:
    """A 1 s round trip (0.5 s each way) against the first probe timeout of 0.2 s: by the
    time the first SLOTS comes back, four more REQSLOTS copies went. That SLOTS answers the
    first copy (it says so): a sample of 1 s. Before, only an answer to the copy sent last
    counted, so such a path was never measured and probed every 0.2 s."""
    net = SecureNet("a", "b", one_way_s=0.5, config=ExonConfig(secure=False))
    a = net.nodes["a"]
    net.send("a", "b", b"x")
    assert net.run(1.1, lambda: a.srtt("b") is not None)
    srtt = a.srtt("b")
    assert srtt is not None and 0.99 <= srtt <= 1.01, srtt
    assert a.stats.reqslots_retransmits >= 4  # copies did go: the answer was to the first
    assert net.run(5, lambda: net.got("b") == [b"x"])


def test_what_a_handshake_held_leaves_once_and_counts_from_then() -> None:
    """0.5 s each way: the handshake takes 1 s, during which Exon's first REQSLOTS waits in
    its queue. The probe timeouts that expire meanwhile add no copies (before: two per
    timeout, all sent at once when the session came up); one probe's worth goes with what
    was held (the request again, and its copy in a datagram of its own). The round trip is measured from when it left (1 s), not from when it was
    queued (2 s)."""
    net = SecureNet("a", "b", one_way_s=0.5)
    a = net.nodes["a"]
    sec = a.secure
    assert sec is not None
    net.send("a", "b", b"x")
    assert net.run(5, lambda: "b" in sec._current)  # the session is up at 1 s
    st = a.stats
    assert st.probe_copies <= 1 and st.reqslots_sent <= 2, (st.probe_copies, st.reqslots_sent)
    assert net.run(5, lambda: a.srtt("b") is not None)
    srtt = a.srtt("b")
    assert srtt is not None and srtt < 1.2, srtt
    assert net.run(5, lambda: net.got("b") == [b"x"])


def test_a_repeated_hello_gets_its_welcome_again_without_a_key_exchange() -> None:
    """The initiator resends its HELLO (the WELCOME is slow: a busy responder, or lost): the
    responder answers the repeat with the same WELCOME, and computes nothing again."""
    net = SecureNet("a", "b", one_way_s=0.3)
    a, b = net.nodes["a"], net.nodes["b"]
    net.send("a", "b", b"x")
    assert net.run(5, lambda: net.got("b") == [b"x"])
    sb = b.stats
    assert a.stats.hello_resends >= 2  # 0.6 s round trip, 0.2 s resends
    assert sb.hellos_answered == 1 and sb.welcomes_repeated == a.stats.hello_resends
    welcomes = {d for src, _, d in net.tap if src == net.addr["b"] and d[1] == 2}
    assert len(welcomes) == 1  # the same bytes each time
    assert a.stats.handshakes_completed == 1 and sb.handshakes_accepted == 1
    # The WELCOME kept for repeats goes after WELCOME_REPEAT_S with no new HELLO to push it
    # out: the layer's timer includes it (an idle responder's memory returns).
    bsec = b.secure
    assert bsec is not None and bsec.kept_welcomes() == 1
    assert net.run(WELCOME_REPEAT_S + 1, lambda: bsec.kept_welcomes() == 0)


def test_an_unconfirmed_session_resends_initiate_before_a_new_handshake() -> None:
    """The INITIATE is lost for a while and the initiator keeps sending under its new session:
    the silence rule (more than 4 datagrams unanswered for 1 s) would start a new handshake,
    but the INITIATE's own fast resends come first; the session is confirmed with no second
    handshake."""
    net = SecureNet("a", "b", one_way_s=0.005)
    a = net.nodes["a"]
    lost = {"n": 0}

    def drop(src: str, dst: str, data: bytes) -> bool:
        if data[1] == 3 and lost["n"] < 7:  # INITIATE: the first seven are lost (1.4 s)
            lost["n"] += 1
            return True
        return False

    net.drop = drop
    for i in range(8):
        net.send("a", "b", b"m%d" % i)
    assert net.run(10, lambda: len(net.got("b")) == 8)
    assert a.stats.handshakes_started == 1 and a.stats.initiate_resends >= 7


def test_a_silence_that_found_the_peer_only_slow_doubles_the_next_one() -> None:
    """A confirmed session goes silent (the peer's answers are held back 1.5 s: a loaded
    node): a new handshake starts after 1 s and finds the same incarnation; the session it
    makes waits 2 s of silence before the next one."""
    net = SecureNet("a", "b", one_way_s=0.005)
    a = net.nodes["a"]
    net.send("a", "b", b"first")
    assert net.run(5, lambda: net.got("b") == [b"first"])
    sec = a.secure
    assert sec is not None
    first = sec._current["b"]
    assert first.silence_s == 1.0
    held: list[tuple[str, str, bytes]] = []
    hold_until = net.now + 1.5

    def drop(src: str, dst: str, data: bytes) -> bool:
        if src == net.addr["b"] and net.now < hold_until:
            held.append((src, dst, data))
            return True
        return False

    net.drop = drop
    for i in range(8):
        net.send("a", "b", b"m%d" % i)
        net.run(0.15)
    assert net.run(10, lambda: len(net.got("b")) == 9 and sec._current["b"] is not first)
    assert a.stats.handshakes_started == 2 and a.stats.peer_restarts == 0
    assert sec._current["b"].silence_s == 2.0


def test_the_node_pace_is_an_option() -> None:
    with pytest.raises(Exception, match="first_probe_rate"):
        ExonConfig(first_probe_rate=-1.0)
    assert dataclasses.replace(ExonConfig(), first_probe_rate=0.0).first_probe_rate == 0.0


def test_a_retry_ends_the_fast_tries_of_that_first_exchange() -> None:
    """The responder is past its handshake rate: it answers the HELLO with a RETRY. That
    says load, not loss: the token HELLO's resends double from the first (its WELCOMEs are
    lost for 2 s here: 3 resends, where the fast tries made 10), and so do, once the session
    is up, the INITIATE's (the responder's answers are lost for 2 s more) and Exon's first
    probes."""
    cfg = ExonConfig()
    net = SecureNet("a", "b", one_way_s=0.005, config=cfg)
    net.start("b", config=dataclasses.replace(cfg, handshake_rate=0.0))  # every HELLO: RETRY
    a = net.nodes["a"]
    lose = {"kind": 2, "until": 2.0}  # WELCOMEs first, then the sealed answers

    def drop(src: str, dst: str, data: bytes) -> bool:
        return src == net.addr["b"] and data[1] == lose["kind"] and net.now < lose["until"]

    net.drop = drop
    net.send("a", "b", b"x")
    net.run(2.0)
    st = a.stats
    assert st.retries_received == 1 and st.handshakes_completed == 0
    assert st.hello_resends == 3, st.hello_resends  # at 0.41, 0.81 and 1.61 s
    lose.update(kind=5, until=net.now + 4.0)
    assert net.run(2.0, lambda: st.handshakes_completed == 1)  # (the resend at 3.21 s)
    sec = a.secure
    assert sec is not None and sec.loaded("b")
    net.run(1.8)  # unconfirmed, with Exon's first REQSLOTS out: 1.8 s of resends
    assert st.initiate_resends <= 2, st.initiate_resends  # (the fast tries: 9)
    assert st.probe_timeouts <= 3, st.probe_timeouts  # (the fast tries: 9)
    assert net.run(10, lambda: net.got("b") == [b"x"])


def test_a_loaded_peer_s_first_probes_double_from_the_first() -> None:
    from a3m.exon.recovery import PathRecovery

    plain = PathRecovery(0.2, 0.002, 2.0, 1400)
    loaded = PathRecovery(0.2, 0.002, 2.0, 1400)
    loaded.set_loaded()
    for _ in range(3):
        plain.on_pto()
        loaded.on_pto()
    assert plain.pto == 0.2  # the steady tries, for a lossy first exchange
    assert loaded.pto == pytest.approx(0.2 * 2 ** 3)


def test_a_peer_slow_by_its_measured_round_trip_is_not_taken_for_a_restart() -> None:
    """The session was made over a fast path (10 ms round trip); then the peer slows down (a
    loaded node: 0.8 s round trips, which Exon's probe timeout follows). Its answers held
    back 1.5 s more are within four of those timeouts, so no new handshake starts (the silence rule alone, 1 s
    or four handshake round trips, started one: under a fleet each producer did, and the key
    exchanges kept the collector drowning)."""
    net = SecureNet("a", "b", one_way_s=0.005)
    a = net.nodes["a"]
    net.send("a", "b", b"first")
    assert net.run(5, lambda: net.got("b") == [b"first"])
    net.one_way_s = 0.4
    for i in range(3):
        net.send("a", "b", b"slow%d" % i)
        assert net.run(10, lambda i=i: len(net.got("b")) == 2 + i)
        net.run(1.2)  # (its ACK back: a round trip measured)
    assert a.peer_pto("b") >= 0.4 and a.stats.handshakes_started == 1
    hold_until = net.now + 1.5

    def drop(src: str, dst: str, data: bytes) -> bool:
        return src == net.addr["b"] and net.now < hold_until

    net.drop = drop
    for i in range(8):
        net.send("a", "b", b"m%d" % i)
        net.run(0.15)
    assert net.run(10, lambda: len(net.got("b")) == 12)
    assert a.stats.handshakes_started == 1


def test_a_round_trip_that_outgrew_the_probe_timeout_is_measured_again() -> None:
    """A 10 ms path slows to 0.8 s (a loaded receiver's queue). Every token is resent before
    its ACK comes, so no ACK is of a first transmission (Karn's rule: no sample) and the
    path would keep its 10 ms timeout, resending each message 4-5 times for ever. The ACK of
    tokens resent only, whose newest copy left longer ago than the timeout, is a lower bound
    of the round trip: taken as a sample, it brings the resends down to one a message."""
    net = SecureNet("a", "b", one_way_s=0.005, config=ExonConfig(secure=False))
    a = net.nodes["a"]
    net.send("a", "b", b"first")
    assert net.run(5, lambda: net.got("b") == [b"first"])
    net.one_way_s = 0.4
    counts = []
    for i in range(6):
        before = a.stats.retransmits
        net.send("a", "b", b"m%d" % i)
        assert net.run(10, lambda i=i: len(net.got("b")) == 2 + i)
        net.run(0.9)  # its ACK is back
        counts.append(a.stats.retransmits - before)
    assert counts[0] >= 4  # the first one finds the old timeout
    assert sum(counts[2:]) <= 4, counts


def test_the_handshake_round_trip_floors_the_first_probe_timeout() -> None:
    """0.5 s each way: the WELCOME comes 1 s after the first HELLO, 0.2 s after its newest
    copy (the fast tries resent it every 0.2 s): the round trip is at least 0.2 s, whichever
    copy it answers. Exon's first exchange with that peer then probes no sooner than a first
    sample of that would give (3 x 0.2 s and the ACK delay), not at the 0.2 s guess; on a
    fast path the guess stays. Not a sample: the least RTT waits for Exon's own."""
    slow = SecureNet("a", "b", one_way_s=0.5)
    a = slow.nodes["a"]
    sec = a.secure
    assert sec is not None
    slow.send("a", "b", b"x")
    assert slow.run(5, lambda: "b" in sec._current)
    assert 0.19 <= sec.handshake_rtt("b") <= 1.0
    stats = a.path_stats("b")
    assert stats["pto_s"] >= 3 * sec.handshake_rtt("b"), stats
    assert stats["srtt_s"] == 0.0 and stats["min_rtt_s"] == 0.0, stats  # (no sample yet)
    assert slow.run(5, lambda: slow.got("b") == [b"x"])
    fast = SecureNet("a", "b", one_way_s=0.005)
    fa = fast.nodes["a"]
    fast.send("a", "b", b"x")
    fsec = fa.secure
    assert fsec is not None
    assert fast.run(5, lambda: "b" in fsec._current)
    assert 0 < fsec.handshake_rtt("b") < 0.05
    assert fa.path_stats("b")["pto_s"] == pytest.approx(ExonConfig().rto_initial_s)
