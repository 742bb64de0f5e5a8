"""Two or more ExonProtocol objects joined in-process: delivery, batching, receipts, windows."""

from __future__ import annotations

import pytest

from a3m.errors import Closed, MessageTooLarge, WouldBlock
from a3m.exon import Delivered, ExonConfig, ReceiptReady, Writable, wire

from .pair import Pair


def test_messages_delivered_once_with_receipts_and_batching() -> None:
    p = Pair("a", "b")
    a = p.nodes["a"]
    rids = [a.send("b", b"m%d" % i, p.now, receipt=True) for i in range(500)]
    p.transfer()
    got = p.delivered("b")
    assert sorted(m for _, m in got) == sorted(b"m%d" % i for i in range(500))
    assert {src for src, _ in got} == {"a"}
    receipts = [e.receipt_id for e in p.events["a"] if isinstance(e, ReceiptReady)]
    assert sorted(receipts) == sorted(rids)
    # Batching: 500 tokens travel in far fewer datagrams than messages.
    assert a.stats.datagrams_out < 60
    assert p.nodes["b"].stats.datagrams_out < 60


def test_acks_are_range_encoded() -> None:
    p = Pair("a", "b")
    for _i in range(300):
        p.nodes["a"].send("b", b"x", p.now)
    p.transfer()
    acks = [f for src, _, d in p.wire_log if src == "b"
            for f in wire.decode_datagram(d)[2] if f[0] == wire.ACK]
    assert sum(c for f in acks for _, c in f[2]) == 300
    assert sum(len(f[2]) for f in acks) <= len(acks) + 2  # contiguous slots -> few ranges


def test_both_directions_and_three_nodes() -> None:
    p = Pair("a", "b", "c")
    for src in "abc":
        for dst in "abc":
            if src != dst:
                for i in range(50):
                    p.nodes[src].send(dst, f"{src}{dst}{i}".encode(), p.now)
    p.transfer()
    for dst in "abc":
        got = sorted(m for _, m in p.delivered(dst))
        want = sorted(f"{s}{dst}{i}".encode() for s in "abc" if s != dst for i in range(50))
        assert got == want


def test_fragmented_8_mib_message_delivered_whole_once() -> None:
    p = Pair("a", "b")
    big = bytes(range(256)) * (8 * 4096)  # 8 MiB
    rid = p.nodes["a"].send("b", big, p.now, receipt=True)
    p.transfer()
    got = p.delivered("b")
    assert len(got) == 1 and got[0][1] == big
    assert ReceiptReady(rid) in p.events["a"]  # type: ignore[arg-type]


def test_fragmented_message_under_loss_is_whole_once() -> None:
    p = Pair("a", "b")
    n = 0

    def lossy(data: bytes, src: str, dst: str) -> bool:
        nonlocal n
        n += 1
        return n % 3 != 0

    p.filter = lossy
    big = bytes(range(256)) * 2000
    p.nodes["a"].send("b", big, p.now)
    p.nodes["a"].send("b", b"small", p.now)
    p.transfer()
    p.advance(30)
    got = sorted(m for _, m in p.delivered("b"))
    assert got == sorted([big, b"small"])


def test_self_send_bypasses_network() -> None:
    p = Pair("a")
    a = p.nodes["a"]
    rid = a.send("a", b"me", p.now, receipt=True)
    assert a.datagrams_to_send(p.now) == []
    evs = a.drain_events()
    assert Delivered("a", b"me") in evs and ReceiptReady(rid) in evs  # type: ignore[arg-type]


def test_message_too_large_and_closed() -> None:
    p = Pair("a", "b", config=ExonConfig(secure=False, max_message_size=1000))
    with pytest.raises(MessageTooLarge):
        p.nodes["a"].send("b", b"x" * 1001, p.now)
    p.nodes["a"].close(p.now)
    with pytest.raises(Closed):
        p.nodes["a"].send("b", b"x", p.now)


def test_window_full_raises_would_block_then_reopens() -> None:
    p = Pair("a", "b", config=ExonConfig(secure=False, window_per_peer=10, window_global=100))
    a = p.nodes["a"]
    for i in range(10):
        a.send("b", b"%d" % i, p.now)
    assert not a.can_send("b")
    with pytest.raises(WouldBlock):
        a.send("b", b"over", p.now)
    p.transfer()
    assert any(isinstance(e, Writable) for e in p.events["a"])
    assert a.can_send("b")
    a.send("b", b"over", p.now)
    p.transfer()
    assert len(p.delivered("b")) == 11


def test_send_many_takes_what_the_windows_admit_and_stops_before_fragments() -> None:
    p = Pair("a", "b", config=ExonConfig(secure=False, window_per_peer=10, window_global=100))
    a = p.nodes["a"]
    assert a.send_many("b", [b"x"], p.now) == 0  # nothing sent to b yet: send() makes the record
    a.send("b", b"first", p.now)
    assert a.send_room("b") == 9
    assert a.send_many("b", [b"m%d" % i for i in range(20)], p.now) == 9  # the window's room
    assert a.send_room("b") == 0 and a.send_many("b", [b"more"], p.now) == 0
    p.transfer()
    big = b"B" * (a.max_unfragmented("b") + 1)
    assert a.send_many("b", [b"s0", b"s1", big, b"s2"], p.now) == 2  # stops before the big one
    assert a.send_many("b", [big], p.now) == 0
    a.send("b", big, p.now)  # (fragments go through send)
    p.transfer()
    got = [payload for _, payload in p.delivered("b")]
    assert sorted(got) == sorted([b"first", *(b"m%d" % i for i in range(9)), b"s0", b"s1", big])
    assert a.in_flight() == 0


def test_idle_records_released_and_discarded() -> None:
    p = Pair("a", "b")
    for _i in range(20):
        p.nodes["a"].send("b", b"x", p.now)
    p.transfer()
    assert p.nodes["a"].record_counts() == (1, 0)
    assert p.nodes["b"].record_counts() == (0, 1)
    p.advance(p.config.idle_release_s + 0.5)
    assert p.nodes["a"].is_idle() and p.nodes["b"].is_idle()


def test_graceful_close_waits_for_in_flight() -> None:
    p = Pair("a", "b")
    a = p.nodes["a"]
    for i in range(50):
        a.send("b", b"%d" % i, p.now)
    a.close(p.now)
    assert not a.is_closed()
    p.transfer()
    assert a.is_closed()
    assert len(p.delivered("b")) == 50


def test_address_change_mid_stream_is_learnt_from_traffic() -> None:
    """b moves from address 'b@1' to 'b@2' while a streams to it: nothing lost or doubled."""
    from a3m.exon import ExonProtocol

    a, b = ExonProtocol("a", ExonConfig(secure=False)), ExonProtocol("b", ExonConfig(secure=False))
    a.associate("b", "b@1")
    b_addr = "b@1"
    got: list[bytes] = []
    now = 0.0
    for i in range(400):
        a.send("b", b"%d" % i, now)
        if i == 200:
            b_addr = "b@2"  # b rebinds; datagrams to the old address are lost from now on
        for _ in range(3):
            for d, addr in a.datagrams_to_send(now):
                if addr == b_addr:
                    b.receive_datagram(d, "a@1", now)
            got.extend(e.payload for e in b.drain_events() if isinstance(e, Delivered))
            for d, _ in b.datagrams_to_send(now):
                a.receive_datagram(d, b_addr, now)
            a.drain_events()
        if i == 200:
            b.announce(now)  # the runtime calls this after a rebind: a learns at once
    assert len(got) > 390  # learnt within a round trip, not after a probe interval
    for _ in range(10):
        now += 0.5
        a.handle_timer(now)
        b.handle_timer(now)
        for d, addr in a.datagrams_to_send(now):
            if addr == b_addr:
                b.receive_datagram(d, "a@1", now)
        got.extend(e.payload for e in b.drain_events() if isinstance(e, Delivered))
        for d, _ in b.datagrams_to_send(now):
            a.receive_datagram(d, b_addr, now)
    assert sorted(got) == sorted(b"%d" % i for i in range(400))
    assert a.stats.address_changes >= 1
    assert a.address_of("b") == "b@2"


def test_once_everything_is_acknowledged_the_next_deadline_is_the_idle_release() -> None:
    """The probe timeout of a token that has been acknowledged is no deadline any more: a
    runtime that sleeps until ``next_timer`` must not be woken for it (it used to be: one
    needless thread wake-up per request of a request/reply exchange)."""
    p = Pair("a", "b")
    a = p.nodes["a"]
    a.send("b", b"x", p.now)
    p.transfer()
    assert a.record_counts() == (1, 0)
    t = a.next_timer()
    assert t is not None and t >= p.now + p.config.idle_release_s - 1e-9
    p.advance(p.config.idle_release_s + 0.5)
    assert a.is_idle()
