"""a3m.exon.Endpoint over real UDP on loopback: delivery, receipts, large payloads, blocking,
address change, faults through the relay, graceful close, hostile datagrams, idle memory."""

from __future__ import annotations

import contextlib
import gc
import socket
import threading
import time
import tracemalloc
from collections.abc import Callable
from typing import Any

import pytest

from a3m.errors import Closed, Timeout, WouldBlock
from a3m.exon import Endpoint
from a3m.runtime.cork import Cork
from a3m.testing.relay import FaultRelay


def collect(ep: Endpoint, n: int, timeout: float = 30) -> list[tuple[str, bytes]]:
    out: list[tuple[str, bytes]] = []
    deadline = time.monotonic() + timeout
    while len(out) < n:
        out.extend(ep.recv_many(4096, timeout=max(0.01, deadline - time.monotonic())))
    return out


def until(done: Callable[[], bool], timeout: float = 30) -> None:
    """Wait for ``done()`` (bounded, generous: a working endpoint is far quicker)."""
    deadline = time.monotonic() + timeout
    while not done() and time.monotonic() < deadline:
        time.sleep(0.01)


def test_send_recv_receipt() -> None:
    with Endpoint("alpha") as a, Endpoint("beta") as b:
        a.associate("beta", b.address)
        rid = a.send("beta", b"hello", receipt=True, timeout=5)
        assert b.recv(timeout=5) == ("alpha", b"hello")
        assert rid is not None and a.wait_receipt(rid, timeout=5)
        assert a.send("beta", b"no receipt", timeout=5) is None
        assert b.recv(timeout=5) == ("alpha", b"no receipt")
        with pytest.raises(Timeout):
            b.recv(timeout=0.05)
        with pytest.raises(WouldBlock):
            b.recv(timeout=0)


def test_8_mib_payload_whole_once() -> None:
    big = bytes(range(256)) * (8 * 4096)
    with Endpoint("alpha") as a, Endpoint("beta") as b:
        a.associate("beta", b.address)
        rid = a.send("beta", big, receipt=True, timeout=30)
        src, payload = b.recv(timeout=30)
        assert src == "alpha" and payload == big
        assert a.wait_receipt(rid, timeout=10)  # type: ignore[arg-type]
        with pytest.raises(Timeout):
            b.recv(timeout=0.2)


def test_both_directions_many_threads() -> None:
    with Endpoint("alpha") as a, Endpoint("beta") as b:
        a.associate("beta", b.address)
        b.associate("alpha", a.address)

        def blast(ep: Endpoint, dst: str, tag: str) -> None:
            for i in range(2000):
                ep.send(dst, f"{tag}{i}".encode(), timeout=10)

        threads = [threading.Thread(target=blast, args=(a, "beta", f"a{t}-")) for t in range(4)]
        threads += [threading.Thread(target=blast, args=(b, "alpha", f"b{t}-")) for t in range(4)]
        for t in threads:
            t.start()
        at_b = collect(b, 8000)
        at_a = collect(a, 8000)
        for t in threads:
            t.join()
        assert sorted(p for _, p in at_b) == sorted(
            f"a{t}-{i}".encode() for t in range(4) for i in range(2000))
        assert sorted(p for _, p in at_a) == sorted(
            f"b{t}-{i}".encode() for t in range(4) for i in range(2000))


def test_blocking_send_times_out_when_receiver_stops_reading() -> None:
    with Endpoint("alpha", window_per_peer=64, window_global=64) as a, \
            Endpoint("beta", recv_buffer_bytes=20_000, slots_ahead=32, max_live_slots=64) as b:
        a.associate("beta", b.address)
        sent = 0
        with pytest.raises(Timeout):
            for _ in range(10_000):
                a.send("beta", b"z" * 500, timeout=0.5)
                sent += 1
        assert b.stats["delivered_bytes"] <= 20_000 + 64 * 500  # bounded, nothing dropped
        got = collect(b, sent)
        assert len(got) == sent and a.in_flight() == 0 or len(got) == sent


@pytest.mark.parametrize("mover", ["receiver", "sender"])
def test_address_change_mid_stream(mover: str) -> None:
    """One side moves from 127.0.0.1 to 127.0.0.2 while alpha streams to beta. The move comes
    at a fixed point of the stream (after 2000 sends, once beta has 1000), not at a point a
    slow receiver would push to the end; the peer counts the change once the new path has
    answered its challenge, which may come after the last message: the test waits for it."""
    with Endpoint("alpha") as a, Endpoint("beta") as b:
        a.associate("beta", b.address)
        got: list[bytes] = []
        n = 6000

        def rx() -> None:
            deadline = time.monotonic() + 120
            while len(got) < n and time.monotonic() < deadline:
                try:
                    got.extend(p for _, p in b.recv_many(4096, timeout=0.5))
                except Timeout:
                    pass

        th = threading.Thread(target=rx)
        th.start()
        ep = b if mover == "receiver" else a
        other = a if mover == "receiver" else b
        for i in range(n):
            if i == 2000:
                until(lambda: len(got) >= 1000)
                assert len(got) >= 1000, "the stream is under way before the move"
                ep.rebind("127.0.0.2:0")
            a.send("beta", b"%d" % i, timeout=30)
        th.join(timeout=130)
        assert sorted(got) == sorted(b"%d" % i for i in range(n))
        assert ep.address[0] == "127.0.0.2"
        until(lambda: other.stats["address_changes"] >= 1)
        assert other.stats["address_changes"] >= 1


def test_exactly_once_through_fault_relay() -> None:
    # The relay stands for a real network: endpoints keep 1400-byte datagrams toward it.
    with Endpoint("alpha", loopback_datagram_size=0) as a, \
            Endpoint("beta", loopback_datagram_size=0) as b, \
            FaultRelay({"beta": b.address}, loss=0.2, dup=0.1, reorder=0.2, seed=3) as relay:
        a.associate("beta", relay.front("beta"))
        n = 3000
        got: list[bytes] = []
        th = threading.Thread(target=lambda: got.extend(p for _, p in collect(b, n, 60)))
        th.start()
        for i in range(n):
            a.send("beta", b"%d" % i, timeout=30)
        th.join(timeout=60)
        assert len(got) == n and set(got) == {b"%d" % i for i in range(n)}
        assert relay.stats.dropped > 0 and relay.stats.duplicated > 0
        time.sleep(0.3)
        with pytest.raises(Timeout):
            b.recv(timeout=0.2)  # no duplicate trickles in later


def test_close_waits_for_in_flight_and_then_refuses() -> None:
    b = Endpoint("beta")
    relay = FaultRelay({"beta": b.address}, loss=0.3, seed=5)
    a = Endpoint("alpha")
    a.associate("beta", relay.front("beta"))
    for i in range(500):
        a.send("beta", b"%d" % i, timeout=10)
    assert a.close(timeout=30) is True  # returns only once every message was acknowledged
    with pytest.raises(Closed):
        a.send("beta", b"late")
    got = collect(b, 500)
    assert sorted(p for _, p in got) == sorted(b"%d" % i for i in range(500))
    relay.close()
    b.close(timeout=5)


def test_hostile_datagrams_are_counted_not_fatal() -> None:
    with Endpoint("alpha") as a, Endpoint("beta") as b:
        a.associate("beta", b.address)
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        junk = [b"", b"\x01", b"\x01\x00\x05alpha\x04beta\x03", b"\xff" * 100,
                b"\x01\x00\x01x\x04beta" + b"\x04" + b"\x00" * 10, bytes(range(256))]
        for j in junk * 20:
            s.sendto(j, b.address)
        s.close()
        a.send("beta", b"still fine", timeout=5)
        assert b.recv(timeout=5) == ("alpha", b"still fine")
        st = b.stats
        assert st["malformed"] + st["truncated"] + st["wrong_dst"] >= 100
        assert st["loop_errors"] == 0


def test_100_idle_peers_are_forgotten_and_memory_returns() -> None:
    # Idle secure sessions are forgotten after session_idle_s, like Exon's records.
    with Endpoint("hub", idle_release_s=0.2, probe_interval_s=0.5, session_idle_s=1.0) as hub:
        gc.collect()
        tracemalloc.start()
        base = tracemalloc.get_traced_memory()[0]
        peers = [Endpoint(f"peer-{i}", idle_release_s=0.2, probe_interval_s=0.5)
                 for i in range(100)]
        for p in peers:
            p.associate("hub", hub.address)
            p.send("hub", b"x" * 100, timeout=5)
        collect(hub, 100)
        # one receive record each (counted: the first ones may already have idled out)
        assert hub.stats["recv_records_created"] >= 100
        for p in peers:
            p.close(timeout=5)
            p._driver.stop()  # no linger (its driver and buffers): measure the hub alone
        del peers, p
        deadline = time.monotonic() + 60  # generous: they idle out within ~2 s
        sec = hub._proto.secure
        assert sec is not None
        while ((hub._proto.record_counts() != (0, 0) or sec.session_count()
                or sec.kept_welcomes()) and time.monotonic() < deadline):
            time.sleep(0.05)
        assert hub._proto.record_counts() == (0, 0)
        assert sec.session_count() == 0 and sec.kept_welcomes() == 0  # WELCOMEs kept 5 s
        gc.collect()
        now = tracemalloc.get_traced_memory()[0]
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        # All 100 peers' records are gone; what stays is per-id caches (headers, addresses).
        print(f"hub memory: base {base} B, peak {peak} B, after idle {now} B")
        # What a forgotten peer leaves, by design, ~1.3 KB (measured 127-132 KB for 100, of
        # which 76 KB allocated under receive_datagrams): its key, kept by trust on first use
        # for the hub's life (~100 B); its path's RTT and rate model (PathRecovery, 49 slots
        # since pacing: kept for up to 4096 paths, so a peer that comes back starts from what
        # was measured); its id and address in the header caches. A session or a record left
        # behind costs several KB each: 100 of them would be far above this bound.
        # On the native engine the records and paths live in Rust memory (not traced here:
        # record_counts() above shows them gone); what it adds in Python objects is each
        # peer's interned name and address tuple (caches bounded at 8192 and 4096 entries),
        # measured ~0.6 KB a peer.
        allowance = 100_000 if type(hub._proto).__name__ == "ExonCore" else 0
        assert now - base < 160_000 + allowance, now - base


def _restart_mid_stream(tmp_path: Any, graceful: bool) -> tuple[Endpoint, list[bytes], int]:
    """alpha streams 4000 messages (paced, so it keeps spare envelopes) to beta, which
    restarts half-way with the same id, port and clock file. Returns alpha, what the two
    beta incarnations received, and how many messages were sent."""
    clock = tmp_path / "beta.clock"
    b = Endpoint("beta", clock_file=clock)
    port = b.address[1]
    a = Endpoint("alpha")
    a.associate("beta", b.address)
    n = 4000
    errors: list[BaseException] = []

    def stream() -> None:
        try:
            for i in range(n):
                a.send("beta", b"%d" % i, timeout=30)
                if i % 100 == 99:
                    time.sleep(0.002)
        except BaseException as exc:  # reported by the test
            errors.append(exc)

    th = threading.Thread(target=stream)
    th.start()
    got = [p for _, p in collect(b, 1500)]
    if graceful:
        assert b.close(timeout=10) is True  # every sender confirmed the revocation
    else:
        b._driver.stop()  # a crash: no close, the clock file is all that survives
    while True:  # what the old incarnation delivered (read after its close, as an app would)
        try:
            got.append(b.recv(timeout=0)[1])
        except (WouldBlock, Closed):
            break
    b2 = Endpoint("beta", bind=f"127.0.0.1:{port}", clock_file=clock)
    try:
        deadline = time.monotonic() + 120  # generous: a working pair is far quicker
        while th.is_alive() or a.in_flight():
            assert time.monotonic() < deadline, "stalled"
            try:
                got.extend(p for _, p in b2.recv_many(4096, timeout=0.2))
            except Timeout:
                pass
        th.join()
        assert not errors, errors
        time.sleep(0.2)
        with contextlib.suppress(Timeout):
            while True:
                got.extend(p for _, p in b2.recv_many(4096, timeout=0.2))
        assert b2._proto.boot_clock > 0
    finally:
        b2.close(timeout=5)
    return a, got, n


def test_receiver_restart_mid_stream_graceful_nothing_lost_nothing_doubled(tmp_path: Any) -> None:
    a, got, n = _restart_mid_stream(tmp_path, graceful=True)
    try:
        assert sorted(got) == sorted(b"%d" % i for i in range(n))  # each exactly once
        assert a.stats["outcome_unknown"] == 0 and a.outcome_unknown() == []
        assert a.stats["revokes_received"] >= 1
    finally:
        a.close(timeout=5)


def test_receiver_crash_mid_stream_no_silent_loss(tmp_path: Any) -> None:
    a, got, n = _restart_mid_stream(tmp_path, graceful=False)
    try:
        unknown = [p for dst, p, _ in a.outcome_unknown() if dst == "beta"]
        assert len(got) == len(set(got))  # never a duplicate
        assert set(got) | set(unknown) == {b"%d" % i for i in range(n)}  # nothing silently lost
        assert a.stats["outcome_unknown"] == len(unknown)
    finally:
        a.close(timeout=5)


def test_wait_receipt_is_false_for_an_unknown_outcome(tmp_path: Any) -> None:
    clock = tmp_path / "beta.clock"
    b = Endpoint("beta", clock_file=clock)
    port = b.address[1]
    with Endpoint("alpha") as a:
        a.associate("beta", b.address)
        a.send("beta", b"warm", timeout=5)
        assert b.recv(timeout=5) == ("alpha", b"warm")
        deadline = time.monotonic() + 5
        while a.in_flight() and time.monotonic() < deadline:  # its ACK is on the way
            time.sleep(0.005)
        b._driver.stop()  # crash while alpha holds spare envelopes
        rid = a.send("beta", b"into the void", receipt=True, timeout=5)
        b2 = Endpoint("beta", bind=f"127.0.0.1:{port}", clock_file=clock)
        try:
            assert rid is not None and a.wait_receipt(rid, timeout=10) is False
            assert a.outcome_unknown() == [("beta", b"into the void", rid)]
            assert a.stats["outcome_unknown"] == 1
        finally:
            b2.close(timeout=5)


class _RecordingCork(Cork):
    """The Endpoint's cork window, keeping each decision (True: the send was held)."""

    def __init__(self, window_s: float) -> None:
        super().__init__(window_s)
        self.held: list[bool] = []

    def follows(self, now: float) -> bool:
        held = super().follows(now)
        self.held.append(held)
        return held


def test_the_first_send_after_a_quiet_spell_leaves_at_once() -> None:
    """The first send of a burst leaves at once (a request's latency); the next one, within
    ``cork_s``, waits for the I/O thread's turn. In one process the second was held before
    the cork window too (the first send wakes the I/O thread, whose turn is then under way):
    what needs the window is shown across processes, below. A busy machine can pause this
    thread between the two sends longer than the window (10 ms): the pair is then sent
    again, so the test asks for a pair within the window rather than for a speed."""
    with Endpoint("alpha", cork_s=0.01) as a, Endpoint("beta") as b:
        a.associate("beta", b.address)
        a.send("beta", b"warm-up", timeout=5)
        assert b.recv(timeout=5) == ("alpha", b"warm-up")
        cork = a._cork = _RecordingCork(0.01)
        pairs = 0
        for _ in range(50):
            until(lambda: a.in_flight() == 0)
            time.sleep(0.1)  # a quiet spell: everything acknowledged, the window over
            a.send("beta", b"first", timeout=5)
            with a._driver.lock:
                assert not a._proto.has_output()  # left at once
            first_at = cork.sent_at
            a.send("beta", b"second", timeout=5)
            pairs += 1
            if cork.sent_at - first_at < cork.window_s:
                break
        assert cork.sent_at - first_at < cork.window_s, "no pair within the window"
        assert cork.held[::2] == [False] * pairs  # every first one left at once
        assert cork.held[-1]  # the second, within the window, waited for the turn
        got = collect(b, 2 * pairs, timeout=30)
        assert sorted(p for _, p in got) == sorted([b"first", b"second"] * pairs)


@pytest.mark.parametrize("cork_s, most", [(0.002, 50), (0.0, None)])
def test_a_stream_to_another_process_shares_datagrams(cork_s: float, most: int | None) -> None:
    """Across processes (the I/O thread asleep between turns), a tight loop of sends used to
    leave a datagram per 20 messages or so, the first of each turn alone; within ``cork_s``
    they wait for the turn and share it (one per 150 with the default 50 us on a quiet
    machine; 900 datagrams before). The window is 2 ms here: with 50 us, a loaded machine
    that pauses the sending loop longer than that between sends ends windows early, and the
    count would measure the machine (the default's effect is a benchmark's figure)."""
    import multiprocessing as mp

    from a3m.benchmarks.transport import exon_receiver

    ctx = mp.get_context("spawn")
    ready, results = ctx.Queue(), ctx.Queue()
    n = 20000
    rx = ctx.Process(target=exon_receiver, args=(ready, results),
                     kwargs={"messages": n, "size": 64}, daemon=True)
    rx.start()
    try:
        with Endpoint("bench-tx", cork_s=cork_s) as a:
            a.associate("bench-rx", tuple(ready.get(timeout=30)))
            for i in range(n):
                a.send("bench-rx", b"%063d" % i, timeout=30)
            report = results.get(timeout=60)
            sent = a.stats["datagrams_out"]
        assert report["received"] == n
        if most is not None:
            assert sent <= n // most, sent
    finally:
        rx.join(10)
        if rx.is_alive():
            rx.kill()


def test_a_stream_of_sends_waits_in_the_buffer_without_the_lock_and_close_sends_it() -> None:
    """In a stream to one node, sends wait in the Endpoint's buffer for the I/O thread's turn
    without taking its lock (they complete while another thread holds it), never beyond the
    windows; close sends what the buffer holds first."""
    with Endpoint("buf-tx", cork_s=0.01) as a, Endpoint("buf-rx") as b:
        a.associate("buf-rx", b.address)
        lock = a._driver.lock
        openers = 0
        for _ in range(50):
            a.send("buf-rx", b"o%d" % openers, timeout=5)
            a.send("buf-rx", b"o%d" % (openers + 1), timeout=5)
            openers += 2
            lock.acquire()
            if a._sbuf.room > 0:
                break
            lock.release()
            time.sleep(0.02)
        else:
            pytest.fail("the send buffer never opened")
        try:
            room = a._sbuf.room
            sent: list[bytes] = []

            def stream() -> None:  # blocks on the lock without the buffer
                for i in range(min(200, room)):
                    a.send("buf-rx", b"s%d" % i, timeout=0)
                    sent.append(b"s%d" % i)

            t = threading.Thread(target=stream, daemon=True)
            t.start()
            t.join(30)
            assert not t.is_alive() and len(sent) == min(200, room)
            assert len(a._sbuf.items) == len(sent)  # (the turn needs the lock we hold)
        finally:
            lock.release()
        assert a.close(timeout=10)
        got = sorted(p for _, p in collect(b, openers + len(sent)))
        assert got == sorted([b"o%d" % i for i in range(openers)] + sent)
        with pytest.raises(Timeout):
            b.recv(timeout=0.2)
