"""A secure node under a flood (docs/exon-wire.md, "Under load"): datagrams of live sessions
are taken first from a batch, handshake work is budgeted per source and in all, a lasting
HELLO flood gets no key exchange after its first burst, and forged cookies and tokens cost
one attempt each. Sans-I/O, virtual clock: counts, never timings."""

from __future__ import annotations

import hashlib
import struct
from random import Random

from a3m.exon import Delivered, ExonConfig
from a3m.exon.secure import NodeKey, packets
from a3m.exon.secure import handshake as hs
from a3m.exon.secure.cookies import SECRET_ROTATION_S, CookieJar
from a3m.exon.secure.meter import (
    HANDSHAKE_BURST_S,
    MAX_SOURCES,
    RETRY_COST,
    SOURCE_RATE,
    source_of,
)

from .secure_net import SecureNet


def _hello(i: int, token: bytes = b"") -> bytes:
    _, msg1 = hs.hello(NodeKey(bytes(range(32))), "b", i)
    head = packets.HELLO_HDR.pack(packets.VERSION, packets.HELLO, len(token)) + token + msg1
    return head + bytes(packets.HELLO_SIZE - len(head))


def _garbage(rng: Random, i: int) -> bytes:
    kind = i % 4
    if kind == 0:
        return rng.randbytes(rng.randint(1, 1400))
    if kind == 1:
        return _hello(i)
    if kind == 2:
        return (packets.INITIATE_HDR.pack(packets.VERSION, packets.INITIATE, i)
                + rng.randbytes(32 + 72 + 80))
    return packets.SEALED_HDR.pack(packets.VERSION, packets.DATA, rng.getrandbits(32), i) + bytes(40)


def test_a_batch_takes_live_sessions_first_and_delivers_everything_once() -> None:
    """Batches of garbage with the stream's datagrams at their end: the stream's go first
    (counted ``data_first``), every message arrives once, and the garbage is only counted."""
    net = SecureNet("a", "b")
    net.send("a", "b", b"hello")
    assert net.run(1, lambda: net.got("b") == [b"hello"])
    a, b = net.nodes["a"], net.nodes["b"]
    rng = Random(5)
    sent = []
    for round_ in range(50):
        for i in range(20):
            payload = b"m%d" % (round_ * 20 + i)
            a.send("b", payload, net.now)
            sent.append(payload)
        ours = [(d, net.addr["a"]) for d, _ in a.datagrams_to_send(net.now)]
        flood = [(_garbage(rng, i), f"evil@{i}") for i in range(64)]
        b.receive_datagrams(flood + ours, net.now)
        for ev in b.drain_events():
            if isinstance(ev, Delivered):
                b.consumed(len(ev.payload))
                net.delivered["b"].append((ev.source, ev.payload))
        net.flush()
        net.run(0.02)
    assert net.run(5, lambda: len(net.got("b")) == 1 + len(sent))
    assert net.got("b")[1:] == sent
    st = b.stats
    assert st.data_first >= 50  # the stream's datagrams were taken ahead of the flood
    assert b.secure is not None and b.secure.session_count() == 1
    assert st.malformed + st.unknown_session + st.cookie_invalid > 0


def test_a_lasting_hello_flood_gets_no_key_exchange_after_its_burst() -> None:
    """5 000 HELLOs a second for 3 s from 254 addresses: key exchanges only in the first
    burst (a tenth of a second's worth), RETRYs within their budget, the rest dropped unread;
    a second after the flood, HELLOs are answered with key exchanges again."""
    rate = 200.0
    net = SecureNet("b", config=ExonConfig(handshake_rate=rate, retry_rate=1000.0))
    b = net.nodes["b"]
    t0 = net.now
    for i in range(15_000):
        net.now = t0 + i / 5_000
        net.inject(_hello(i), f"spoofed@{i % 254}", "b")
        if i % 100 == 0:
            b.datagrams_to_send(net.now)
    st = b.stats
    assert st.hellos_answered <= rate * HANDSHAKE_BURST_S + 1
    assert st.retries_sent <= 1000 * (3 + HANDSHAKE_BURST_S) + 1
    assert st.hellos_answered + st.retries_sent + st.unauth_shed == 15_000
    assert b.secure is not None and b.secure.session_count() == 0
    net.now += 1.5  # the flood is over: the handshake budget recovers
    before = st.hellos_answered
    net.inject(_hello(99_999), "real@1", "b")
    assert st.hellos_answered == before + 1


def test_one_source_gets_its_share_and_others_are_still_served() -> None:
    """One address sending HELLOs as fast as it can gets SOURCE_RATE a second of work (after
    its burst), a RETRY taking RETRY_COST of it; another address is answered meanwhile.
    Forged INITIATEs spend no source's budget: their cookie is checked first (an address an
    attacker forges keeps its HELLOs' RETRYs). An IPv6 source is its /64, whatever the port
    or the rest of the address."""
    # Every HELLO gets a RETRY (no key exchange), as many as the source's budget allows.
    net = SecureNet("b", config=ExonConfig(handshake_rate=0.0, retry_rate=1e6))
    b = net.nodes["b"]
    st = b.stats
    share = SOURCE_RATE / RETRY_COST
    n = int(2 * share)  # more than the source may have: a second's burst and 0.2 s
    for i in range(n):
        net.now += 0.2 / n  # for 0.2 s
        net.inject(_hello(i), ("192.0.2.7", 1000 + i), "b")
    worked = st.retries_sent
    assert share <= worked <= share * (1 + 0.2) + 1
    assert st.unauth_shed == n - worked > 0
    net.inject(_hello(5), ("192.0.2.8", 1), "b")
    assert st.retries_sent == worked + 1
    for i in range(2_000):  # forged INITIATEs: refused at their cookie, no budget spent
        net.now += 0.0001
        net.inject(packets.INITIATE_HDR.pack(packets.VERSION, packets.INITIATE, i)
                   + bytes(32 + 72 + 80), ("192.0.2.9", 1000 + i), "b")
    assert st.cookie_invalid == 2_000 and st.unauth_shed == n - worked
    net.inject(_hello(6), ("192.0.2.9", 1), "b")  # its source's budget is whole: a RETRY
    assert st.retries_sent == worked + 2
    assert source_of(("2001:db8::1", 5, 0, 0)) == source_of(("2001:db8::ffff:1", 6, 0, 0))
    assert source_of(("2001:db8:0:1::1", 5, 0, 0)) != source_of(("2001:db8::1", 5, 0, 0))
    assert source_of(("192.0.2.7", 1)) == source_of(("192.0.2.7", 2))


def test_many_nodes_behind_one_address_are_not_load() -> None:
    """300 HELLOs from one address at once (nodes of one host starting together) stay under
    handshake_rate: no per-source budget applies, every one is answered (a key exchange, or
    a RETRY past the handshake bucket's burst)."""
    net = SecureNet("b")
    b = net.nodes["b"]
    for i in range(300):
        net.inject(_hello(i), ("127.0.0.1", 5000 + i), "b")
    st = b.stats
    assert st.unauth_shed == 0
    assert st.hellos_answered + st.retries_sent == 300 and st.hellos_answered > 0


def test_the_sources_tracked_stay_bounded() -> None:
    net = SecureNet("b", config=ExonConfig(handshake_rate=0.0, retry_rate=0.0))
    b = net.nodes["b"]
    for i in range(3 * MAX_SOURCES):
        net.inject(_hello(i), f"spoofed@{i}", "b")
    assert b.secure is not None and 0 < b.secure.source_count() <= MAX_SOURCES
    assert b.stats.unauth_shed == 3 * MAX_SOURCES  # no RETRY budget at all: nothing answered
    assert b.datagrams_to_send(net.now) == []


def test_a_handshake_completes_beside_a_flood_within_the_budgets() -> None:
    """A real peer's handshake while spoofed HELLOs and forged INITIATEs arrive from 200
    other addresses (fewer than the budgets): the peer gets its session and its message."""
    net = SecureNet("a", "b")
    b = net.nodes["b"]
    rng = Random(9)
    net.send("a", "b", b"x")
    for i in range(200):
        net.inject(_garbage(rng, i), f"spoofed@{i}", "b")
    assert net.run(5, lambda: net.got("b") == [b"x"])
    assert b.stats.handshakes_accepted == 1


def test_cookies_and_tokens_name_their_secret_and_live_over_rotations() -> None:
    """A cookie opens under the secret its first nonce byte names, for as long as a cookie
    lives (two rotations later too); a token is checked against the secret current when it
    was made; a forged or too-old one is refused."""
    jar = CookieJar(Random(1).randbytes)
    bound = b"addr|e|index"
    cookie = jar.seal(bytes(32), 7, bound, 0.0)
    token = jar.token(bound, 0.0)
    for t in (0.0, SECRET_ROTATION_S + 1, 2 * SECRET_ROTATION_S - 1):
        assert jar.open(cookie, bound, t) == (bytes(32), 7, 0.0)
        assert jar.token_ok(token, bound, t)
    assert jar.open(cookie, b"other", 1.0) is None
    assert not jar.token_ok(token, b"other", 1.0)
    forged = bytearray(cookie)
    forged[0] ^= 0xFF  # names no secret held: refused before any decryption
    assert jar.open(bytes(forged), bound, 1.0) is None
    forged_token = struct.pack(">d", 1.0) + bytes(16)
    assert not jar.token_ok(forged_token, bound, 2.0)
    assert jar.open(cookie, bound, 3 * SECRET_ROTATION_S + 1) is None  # too old, its secret gone
    assert not jar.token_ok(token, bound, 3 * SECRET_ROTATION_S + 1)


def test_peers_proven_by_retry_behind_one_address_are_held_by_cpu_not_its_budget() -> None:
    """1 500 nodes behind one address (a NAT, a Kubernetes node) handshake at once with a
    node under load: each first HELLO gets a RETRY, the HELLO with its token proves the
    address, and from then on neither that HELLO nor the INITIATE after it is held by the
    source's budget (SOURCE_RATE, 100 a second: 15 s for 1 500), only by the key
    exchanges of proven peers (handshake_rate a second). Virtual clock: all complete
    within 2 s of it, every one at the first try of each packet."""
    n = 1_500
    net = SecureNet("b", config=ExonConfig(handshake_rate=1000.0))
    b = net.nodes["b"]
    st = b.stats
    key = NodeKey(bytes(range(1, 33)))
    addrs = [("198.51.100.1", 20_000 + i) for i in range(n)]
    hellos = {}
    for i, addr in enumerate(addrs):
        e = NodeKey(hashlib.sha256(b"%d" % i).digest())  # (distinct ephemeral keys)
        sym, msg1 = hs.hello(e, "b", i)
        hellos[addr] = (i, e, sym, msg1)

    def out() -> dict[tuple[str, int], bytes]:
        return {addr: d for d, addr in b.datagrams_to_send(net.now)}

    def hello(addr: tuple[str, int], token: bytes = b"") -> bytes:
        msg1 = hellos[addr][3]
        head = packets.HELLO_HDR.pack(packets.VERSION, packets.HELLO, len(token)) + token + msg1
        return head + bytes(packets.HELLO_SIZE - len(head))

    t0 = net.now
    tokens: dict[tuple[str, int], bytes] = {}
    welcomes: dict[tuple[str, int], bytes] = {}
    for _ in range(50):  # rounds 0.2 s apart (the resend interval): who has no WELCOME
        pending = [a for a in addrs if a not in welcomes]  # sends its HELLO (again)
        if not pending:
            break
        start = net.now
        for k, addr in enumerate(pending):  # everyone within 0.15 s: load
            net.now = start + k * 0.15 / len(pending)
            net.inject(hello(addr, tokens.get(addr, b"")), addr, "b")
        for addr, d in out().items():
            if d[1] == packets.WELCOME:
                welcomes[addr] = d
            elif d[1] == packets.RETRY:
                tokens[addr] = d[packets.RETRY_HDR.size:]
        net.now = start + 0.2
    assert len(welcomes) == n and len(tokens) > n // 2  # most proved their address first
    assert net.now - t0 <= 3.0, net.now - t0  # (the source's budget alone: 15 s and more)
    initiates = {}
    for addr, d in welcomes.items():
        i, e, sym, _ = hellos[addr]
        w, re = hs.read_welcome(sym, e, d[packets.WELCOME_HDR.size:])
        msg3, _ = hs.initiate(sym, key, re, f"p{i}", 7)
        initiates[addr] = (packets.INITIATE_HDR.pack(packets.VERSION, packets.INITIATE, i)
                           + e.public + w.cookie + msg3)
    for addr in tokens:  # the proven ones' INITIATEs, all at once: none held
        net.inject(initiates[addr], addr, "b")
    assert st.handshakes_accepted == len(tokens)
    for _ in range(20):  # those welcomed before the load began are budgeted: sent again
        if st.handshakes_accepted == n:
            break
        net.now += 0.2
        for addr in welcomes:
            if addr not in tokens:
                net.inject(initiates[addr], addr, "b")
    assert st.handshakes_accepted == n
    assert b.secure is not None and b.secure.session_count() == n


def test_initiates_of_a_fleet_behind_one_address_do_not_spend_its_budget() -> None:
    """Under load, the INITIATEs that answer WELCOMEs we made lately, and their repeats (a
    busy node answers late, the initiators resend), take nothing from their source's budget:
    in the 10 000-producer fan-in they spent 127.0.0.1's, and its HELLOs got no RETRY."""
    net = SecureNet("b", "a")
    b = net.nodes["b"]
    net.addr["a"] = "127.0.0.1:40000"
    b.associate("a", net.addr["a"])
    held: list[bytes] = []

    def hold(src: str, dst: str, data: bytes) -> bool:
        if src == net.addr["a"] and data[1] == 3:  # a's INITIATE: held back for now
            held.append(data)
            return True
        return False

    net.drop = hold
    net.send("a", "b", b"through")
    assert net.run(1, lambda: bool(held))
    net.drop = lambda src, dst, data: data[1] == 3
    for i in range(3000):  # meanwhile a flood from a's address spends its source's budget
        b.receive_datagram(_hello(i), net.addr["a"], net.now)
    b.datagrams_to_send(net.now)
    shed = b.stats.unauth_shed
    assert shed > 0
    for _ in range(21):  # a's INITIATE arrives at last, and 20 repeats of it
        b.receive_datagram(held[0], net.addr["a"], net.now)
    st = b.stats
    assert st.handshakes_accepted == 1 and st.handshake_repeats == 20
    assert st.unauth_shed == shed  # none of them was shed
