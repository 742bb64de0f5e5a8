"""Secure associations (docs/exon-wire.md, "Secure associations"): the attacks of a host on
the path or beside it, each of which succeeds on a node that opted out, and the handshake's
cost. Sans-I/O, virtual clock; tests/runtime/test_runtime_attacks.py repeats the attacks over
real UDP."""

from __future__ import annotations

import struct
import tracemalloc

import pytest
from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from a3m.exon import ExonConfig, wire
from a3m.exon.events import KeyRefused
from a3m.exon.secure import NodeKey, TrustStore, packets
from a3m.exon.secure import handshake as hs
from a3m.exon.secure.replay import WINDOW, ReplayWindow

from .secure_net import SecureNet

SECRET = b"the-payload-nobody-else-may-read"
CLEAR = ExonConfig(secure=False)


def stream(net: SecureNet, n: int, src: str = "a", dst: str = "b", tag: bytes = b"m") -> None:
    for i in range(n):
        net.send(src, dst, tag + b"%d" % i)


def test_payloads_never_cross_the_wire_in_clear() -> None:
    net = SecureNet("a", "b")
    for _ in range(20):
        net.send("a", "b", SECRET)
    assert net.run(5, lambda: len(net.got("b")) == 20)
    assert net.tap and not any(SECRET in d for _, _, d in net.tap)
    assert not any(b"\x01a\x01b" in d for _, _, d in net.tap)  # node ids are sealed too
    # The same stream in clear shows them: the test can see what it claims is hidden.
    clear = SecureNet("a", "b", config=CLEAR)
    clear.send("a", "b", SECRET)
    assert clear.run(5, lambda: len(clear.got("b")) == 1)
    assert any(SECRET in d for _, _, d in clear.tap)


def _forged_reqslots(src: str, dst: str) -> bytes:
    return wire.encode_header(src, dst) + wire.encode_reqslots(0, 0, 2**60)


@pytest.mark.parametrize("secure", [True, False])
def test_a_spoofed_source_moves_nothing_and_forged_frames_stop_nothing(secure: bool) -> None:
    """The attacker knows the node ids only. In clear, one datagram claiming to be `a` steals
    a's traffic (b sends it to the attacker) and two forged REQSLOTS stop the stream."""
    net = SecureNet("a", "b", config=None if secure else CLEAR)
    stream(net, 200)
    net.run(0.05)
    for _ in range(2):
        net.inject(_forged_reqslots("a", "b"), "evil@9", "b")
        net.inject(wire.encode_header("a", "b") + wire.encode_slots(0, 1, 0), "evil@9", "b")
    stream(net, 200, tag=b"n")
    done = net.run(10, lambda: len(net.got("b")) == 400 and net.nodes["a"].in_flight() == 0)
    stolen = net.received_by.get("evil@9", [])
    if secure:
        assert done and sorted(net.got("b")) == sorted(
            [b"m%d" % i for i in range(200)] + [b"n%d" % i for i in range(200)])
        assert stolen == []
        assert net.nodes["b"].address_of("a") == "a@0"
        assert net.nodes["b"].stats.plain_refused == 4
    else:
        assert stolen  # b's answers for a went to the attacker


def test_a_replay_from_another_address_is_dropped_and_moves_nothing() -> None:
    net = SecureNet("a", "b")
    stream(net, 50)
    assert net.run(5, lambda: len(net.got("b")) == 50)
    captured = [d for s, _, d in net.tap if s == "a@0" and d[1] == packets.DATA]
    assert captured
    before = net.nodes["b"].stats.replayed
    for d in captured:
        net.inject(d, "evil@9", "b")  # the same bytes, from elsewhere
        net.inject(d, "a@0", "b")  # and from a's own address
    net.run(1)
    st = net.nodes["b"].stats
    assert st.replayed - before == 2 * len(captured)
    assert st.path_challenges == 0 and net.nodes["b"].address_of("a") == "a@0"
    assert len(net.got("b")) == 50 and "evil@9" not in net.received_by


def test_forged_sealed_datagrams_are_counted_and_change_nothing() -> None:
    net = SecureNet("a", "b")
    stream(net, 10)
    assert net.run(5, lambda: len(net.got("b")) == 10)
    real = next(d for s, _, d in net.tap if s == "a@0" and d[1] == packets.DATA)
    index = struct.unpack_from(">I", real, 2)[0]
    for counter in range(1000, 1100):  # the right session index, made-up contents
        hdr = packets.SEALED_HDR.pack(packets.VERSION, packets.DATA, index, counter)
        net.inject(hdr + bytes(40), "evil@9", "b")
    assert net.nodes["b"].stats.forged == 100
    stream(net, 10, tag=b"n")
    assert net.run(5, lambda: len(net.got("b")) == 20)


def test_mobility_moves_only_after_the_new_address_answers_and_within_3x_before() -> None:
    net = SecureNet("a", "b")
    stream(net, 100)
    assert net.run(5, lambda: len(net.got("b")) == 100)
    net.move("a", "a@1")
    stream(net, 100, tag=b"n")
    assert net.run(5, lambda: len(net.got("b")) == 200 and net.nodes["a"].in_flight() == 0)
    net.run(0.5)
    b = net.nodes["b"]
    assert b.stats.paths_validated == 1 and b.address_of("a") == "a@1"
    # Before the challenge came back, b sent a@1 at most 3x what it had received from it.
    sent_to = net.received_by["a@1"]
    first_answer = next(i for i, (s, dst, d) in enumerate(net.tap)
                        if s == "a@1" and d[1] == packets.RESPONSE)
    got_from = sum(len(d) for s, _, d in net.tap[:first_answer] if s == "a@1")
    before = sum(len(d) for s, dst, d in net.tap[:first_answer]
                 if dst == "a@1" and s == "b@0")
    assert 0 < before <= 3 * got_from, (before, got_from)
    assert len(sent_to) > 1


def test_a_relayed_datagram_gets_a_challenge_the_attacker_cannot_answer() -> None:
    """An on-path attacker drops a's newest datagram and forwards it from its own address: b
    challenges that address, which never answers; b sends it at most 3x what it got, and the
    stream goes on at a's proven address."""
    net = SecureNet("a", "b")
    stream(net, 20)
    assert net.run(5, lambda: len(net.got("b")) == 20)
    held: list[bytes] = []

    def steal_one(src: str, dst: str, data: bytes) -> bool:
        if src == "a@0" and data[1] == packets.DATA and not held:
            held.append(data)
            return True
        return False

    net.drop = steal_one
    stream(net, 20, tag=b"n")
    net.run(0.001)
    assert held
    net.drop = None
    net.inject(held[0], "evil@9", "b")
    stream(net, 20, tag=b"o")
    assert net.run(10, lambda: len(net.got("b")) == 60 and net.nodes["a"].in_flight() == 0)
    net.run(15)  # the challenges back off: 0.2 s, 0.4 s ... 5 of them
    b = net.nodes["b"]
    # The challenge went unanswered; a's next datagram from its proven address ended it.
    assert b.stats.path_challenges >= 1 and b.stats.paths_validated == 0
    assert b.address_of("a") == "a@0"
    to_evil = sum(len(d) for d in net.received_by.get("evil@9", []))
    assert 0 < to_evil <= 3 * len(held[0])


def test_a_flood_of_forged_handshakes_and_frames_keeps_no_state() -> None:
    """100 000 REQSLOTS from made-up ids made 100 000 receive records in clear; the secure
    node refuses them, answers nobody, and a HELLO flood past the rate gets small RETRYs and
    no key exchange, then, past the RETRY rate, nothing. Memory stays flat."""
    net = SecureNet("b", config=ExonConfig(handshake_rate=100.0, retry_rate=2000.0))
    b = net.nodes["b"]
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    for i in range(20_000):
        net.inject(_forged_reqslots(f"ghost-{i}", "b"), f"spoofed@{i}", "b")
    hello = NodeKey(bytes(range(32)))
    for i in range(5_000):
        _, msg1 = hs.hello(hello, "b", i)
        head = packets.HELLO_HDR.pack(packets.VERSION, packets.HELLO, 0) + msg1
        net.inject(head + bytes(packets.HELLO_SIZE - len(head)), f"spoofed@{i}", "b")
    out = b.datagrams_to_send(net.now)
    grown = tracemalloc.get_traced_memory()[0] - base
    tracemalloc.stop()
    assert b.record_counts() == (0, 0) and b.secure is not None
    assert b.secure.session_count() == 0 and b.secure.pending_count() == 0
    assert b.stats.plain_refused == 20_000
    # Past the handshake rate's burst, RETRYs while the RETRY budget's burst lasts, then
    # nothing: every HELLO is accounted for, none of the flood costs more.
    st = b.stats
    assert st.hellos_answered <= 11 and 0 < st.retries_sent <= 201
    assert st.hellos_answered + st.retries_sent + st.unauth_shed == 5_000
    assert all(len(d) < packets.HELLO_SIZE for d, _ in out if d[1] == packets.RETRY)
    assert all(len(d) <= 3 * packets.HELLO_SIZE for d, _ in out)
    assert grown < 2_000_000, grown  # what is left is the answers not yet sent


def test_retry_costs_a_round_trip_and_then_completes() -> None:
    net = SecureNet("a", "b", config=ExonConfig(handshake_rate=0.0))  # always busy
    net.send("a", "b", b"x")
    assert net.run(5, lambda: net.got("b") == [b"x"])
    assert net.nodes["b"].stats.retries_sent == 1 and net.nodes["a"].stats.retries_received == 1
    assert net.nodes["b"].stats.token_invalid == 0


def test_forged_initiate_and_a_cookie_from_another_address_are_refused() -> None:
    net = SecureNet("a", "b")
    net.drop = lambda src, dst, d: d[1] == packets.INITIATE  # held by the attacker
    net.send("a", "b", b"x")
    net.run(0.05)
    initiate = next(d for s, _, d in net.tap if d[1] == packets.INITIATE)
    net.drop = None
    net.inject(initiate, "evil@9", "b")  # its cookie is bound to a's address
    forged = bytearray(initiate)
    forged[-1] ^= 1  # a bit of the Noise message
    net.inject(bytes(forged), "a@0", "b")
    st = net.nodes["b"].stats
    assert st.cookie_invalid == 1 and st.handshake_failed == 1 and st.handshakes_accepted == 0
    net.inject(initiate, "a@0", "b")
    net.inject(initiate, "a@0", "b")  # a replay: answered under the session, nothing new
    assert st.handshakes_accepted == 1 and st.handshake_repeats == 1
    assert net.nodes["b"].secure is not None and net.nodes["b"].secure.session_count() == 1
    assert net.run(5, lambda: net.got("b") == [b"x"])


def test_a_pinned_key_refuses_an_impostor_and_strict_refuses_strangers() -> None:
    net = SecureNet("a", "b")
    b = net.nodes["b"]
    b.associate("a", "a@0", NodeKey(bytes(32 * [7])).public)  # not a's key
    net.send("a", "b", b"x")
    net.run(2)
    assert net.got("b") == [] and b.stats.key_refused >= 1
    assert isinstance(net.events["b"][0], KeyRefused) and net.events["b"][0].peer == "a"
    strict = SecureNet("a", "b")
    strict.start("b", trust=TrustStore("strict"))
    strict.send("a", "b", b"x")
    strict.run(2)
    assert strict.got("b") == [] and strict.nodes["b"].stats.key_refused >= 1
    pinned = SecureNet("a", "b")
    pinned.start("b", trust=TrustStore("strict")).associate("a", "a@0",
                                                             pinned.nodes["a"].secure.key.public)
    pinned.send("a", "b", b"x")
    assert pinned.run(2, lambda: pinned.got("b") == [b"x"])


def test_trust_on_first_use_refuses_a_second_key_for_the_same_id() -> None:
    net = SecureNet("a", "b")
    net.send("a", "b", b"x")
    assert net.run(2, lambda: net.got("b") == [b"x"])
    net.start("a", key=NodeKey(bytes(32 * [9])))  # "a" again, another key
    net.nodes["a"].associate("b", "b@0")
    net.send("a", "b", b"y")
    net.run(2)
    assert net.got("b") == [b"x"] and net.nodes["b"].stats.key_refused >= 1


def test_a_restart_makes_a_new_session_and_old_datagrams_are_refused() -> None:
    net = SecureNet("a", "b")
    stream(net, 20)
    assert net.run(5, lambda: len(net.got("b")) == 20 and net.nodes["a"].in_flight() == 0)
    old = [d for s, _, d in net.tap if s == "b@0" and d[1] == packets.DATA]
    net.start("a")  # same key, new incarnation
    net.nodes["a"].associate("b", "b@0")
    net.send("a", "b", b"after")
    assert net.run(5, lambda: b"after" in net.got("b"))
    assert net.nodes["b"].stats.peer_restarts == 1
    for d in old:
        net.inject(d, "b@0", "a")
    assert net.nodes["a"].stats.unknown_session == len(old)


def test_the_handshake_costs_one_round_trip_at_most() -> None:
    times = {}
    for name, cfg in (("secure", None), ("clear", CLEAR)):
        net = SecureNet("a", "b", one_way_s=0.01, config=cfg)
        net.send("a", "b", b"x")
        assert net.run(5, lambda n=net: n.got("b") == [b"x"])
        times[name] = net.now
    assert times["secure"] - times["clear"] <= 0.02 + 1e-9, times


def test_golden_handshake_vectors() -> None:
    """Fixed keys give fixed bytes (docs/exon-wire.md shows them). WELCOME was checked once
    against an independent Noise implementation (noiseprotocol 0.3.1): byte for byte."""
    ki, ei = NodeKey(bytes(range(32))), NodeKey(bytes(range(32, 64)))
    kr, er = NodeKey(bytes(range(64, 96))), NodeKey(bytes(range(96, 128)))
    sym, msg1 = hs.hello(ei, "beta", 7)
    cookie = bytes(72)
    _, msg2 = hs.respond(kr, "beta", er, ei.public, 7, 9, 5, cookie)
    w, re = hs.read_welcome(sym, ei, msg2)
    msg3, keys = hs.initiate(sym, ki, re, "alpha", 11)
    assert msg1.hex() == ("358072d6365880d1aeea329adf9121383851ed21a28e3b75e965d0d2cd166254"
                          "00000007")
    assert (w.responder_index, w.incarnation, w.responder_id) == (9, 5, "beta")
    assert msg2.hex()[:64] == GOLDEN_MSG2_PREFIX
    assert msg3.hex()[:64] == GOLDEN_MSG3_PREFIX
    assert keys[0].hex()[:16] == GOLDEN_K1_PREFIX
    inner = wire.encode_header("alpha", "beta") + wire.encode_token(1000, 7, b"hi")
    hdr = packets.SEALED_HDR.pack(packets.VERSION, packets.DATA, 9, 0)
    sealed = hdr + ChaCha20Poly1305(keys[0]).encrypt(bytes(12), inner, hdr)
    assert sealed.hex() == GOLDEN_DATA


GOLDEN_MSG2_PREFIX = "675dd574ed7789310b3d2e7681f3790b466c773b1521fecf36577958371ea52f"
GOLDEN_MSG3_PREFIX = "1dc00df062a51249321a8f8349c312567dc00ed837b5fc3fa4c72162d39a4973"
GOLDEN_K1_PREFIX = "dff3528565acdc10"
GOLDEN_DATA = ("05050000000900000000000000009bb0f943764f5e3c7a6d3b3d57bbdbf79b0093858c39778999"
               "c94c82e11c641e261ea9cf425fccdbe21b4219704f540136cc01")


def test_the_replay_window() -> None:
    net = SecureNet("a", "b")
    net.send("a", "b", b"x")
    assert net.run(2, lambda: net.got("b") == [b"x"])
    sa, b = net.nodes["a"].secure, net.nodes["b"]
    assert sa is not None
    s = sa._current["b"]
    base = s.counter

    def deliver(offset: int) -> bool:
        """Seal a keepalive with counter base + offset; True if b took it."""
        s.counter = base + offset
        before = b.stats.replayed
        b.receive_datagram(sa._seal(s, packets.DATA, b"", net.now), "a@0", net.now)
        return b.stats.replayed == before

    assert [deliver(o) for o in (0, 1, 5, 3)] == [True] * 4
    assert [deliver(o) for o in (3, 5, 4, 2, 2)] == [False, False, True, True, False]
    assert deliver(10_000)
    assert not deliver(10_000 - WINDOW) and deliver(10_000 - WINDOW + 1)
    assert not deliver(10_000 - WINDOW + 1)


@settings(max_examples=200, deadline=None)
@given(steps=st.lists(st.tuples(st.integers(0, 3), st.integers(0, 3 * WINDOW)), max_size=300))
def test_the_replay_ring_agrees_with_a_set_of_every_counter(
        steps: list[tuple[int, int]]) -> None:
    """The ring of bytes (replay.py) says what a set of every counter accepted and the
    window's rule say, over jumps up (a word, a ring's length, more) and counters below."""
    ring, seen, top, c = ReplayWindow(), set(), -1, 0
    for kind, x in steps:
        # a step up (small, past a byte, past the ring), or a look below the highest
        c = (top + 1 + x % 9 if kind == 0 else top + 1 + x if kind == 1
             else max(0, top - x % (WINDOW + 64)) if kind == 2 else max(0, top - x % 16))
        want = c not in seen and (c > top or top - c < WINDOW)
        assert ring.fresh(c) == want
        if want:
            ring.accept(c)
            seen.add(c)
            top = max(top, c)
    for x in range(max(0, top - WINDOW - 8), top + 9):  # every counter near the window
        assert ring.fresh(x) == (x not in seen and (x > top or top - x < WINDOW))


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(kind=st.integers(0, 9), body=st.binary(max_size=600))
def test_fuzzed_secure_datagrams_are_counted_never_raised(kind: int, body: bytes) -> None:
    net = SecureNet("b")
    b = net.nodes["b"]
    data = bytes((packets.VERSION, kind)) + body
    b.receive_datagram(data, "x@1", 0.0)
    b.datagrams_to_send(0.0)
    b.handle_timer(1.0)
    assert b.record_counts() == (0, 0) and b.secure.session_count() == 0


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(flips=st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 7)), min_size=1,
                      max_size=4),
       pick=st.integers(0, 10_000), cut=st.integers(0, 600))
def test_mutated_real_datagrams_mid_stream_are_dropped_and_the_stream_goes_on(
        flips: list[tuple[int, int]], pick: int, cut: int) -> None:
    """Every kind of datagram a real exchange made (HELLO, WELCOME, INITIATE, DATA), with bits
    flipped or cut short, fed to both nodes from their peer's address and another one while
    the stream runs: nothing raises, nothing is delivered twice or invented."""
    net = SecureNet("a", "b")
    stream(net, 30)
    assert net.run(5, lambda: len(net.got("b")) == 30)
    real = [d for _, _, d in net.tap]
    for i, (pos, bit) in enumerate(flips):
        d = bytearray(real[(pick + i) % len(real)])
        d[pos % len(d)] ^= 1 << bit
        bad = bytes(d[:max(1, len(d) - cut % (len(d) + 1))]) if i % 2 else bytes(d)
        for node, src in (("b", "a@0"), ("a", "b@0"), ("b", "evil@9")):
            net.inject(bad, src, node)
    stream(net, 30, tag=b"n")
    assert net.run(10, lambda: len(net.got("b")) == 60 and net.nodes["a"].in_flight() == 0)
    assert sorted(net.got("b")) == sorted([b"m%d" % i for i in range(30)]
                                          + [b"n%d" % i for i in range(30)])
    assert net.nodes["b"].address_of("a") == "a@0"


def test_what_waits_for_a_handshake_is_bounded_in_count_and_bytes() -> None:
    """A peer that never answers while its node keeps handing datagrams over (retransmissions
    of 60 KB loopback datagrams, or many small ones): the secure layer holds at most
    MAX_QUEUED datagrams and MAX_QUEUED_BYTES for it, dropping the oldest (counted)."""
    from a3m.exon.secure.state import MAX_QUEUED, MAX_QUEUED_BYTES

    net = SecureNet("a")
    sec = net.nodes["a"].secure
    assert sec is not None
    out: list[tuple[bytes, object]] = []
    for i in range(100):
        sec.seal("b", bytes([i]) * 60_000, "b@0", 0.0, out)
    init = sec._pending["b"]
    assert init.queued_bytes <= MAX_QUEUED_BYTES and len(init.queue) >= 2
    assert init.queued_bytes == sum(len(d) for d in init.queue)
    assert init.queue[-1][0] == 99  # the newest kept
    for _ in range(1000):
        sec.seal("b", b"small", "b@0", 0.0, out)
    assert len(init.queue) == MAX_QUEUED and init.queued_bytes == 5 * MAX_QUEUED
    assert net.nodes["a"].stats.sealed_dropped == 100 + 1000 - MAX_QUEUED
    assert out == []  # nothing sealed without a session
