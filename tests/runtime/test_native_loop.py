"""The native engine's I/O loop (``ExonCore.run_io``): the I/O thread waits, reads, opens,
acknowledges, seals and sends without the interpreter's lock, and hands Python only what
needs it. Streams through it stay exact, in order, and the switch turns it off."""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

import a3m

from .streams import push_pull

pytestmark = pytest.mark.skipif(not a3m.NATIVE, reason="the native data plane is not built")


def _stream(name: str, n: int, size: int) -> tuple[a3m.Node, a3m.Node, list[bytes]]:
    """``n`` messages of ``size`` bytes PUSH -> PULL between two fresh nodes, 1400-byte
    datagrams (a message of several fragments): what the PULL received, in order."""
    rx = a3m.Node(f"{name}-rx", bind="127.0.0.1:0", loopback_datagram_size=0)
    tx = a3m.Node(f"{name}-tx", bind="127.0.0.1:0", loopback_datagram_size=0)
    pull = rx.socket(a3m.PULL, "in")
    tx.associate(rx.id, rx.address)
    push = tx.socket(a3m.PUSH, "out")
    push.link((rx.id, "in"))
    assert push.wait_linked(timeout=10)
    got: list[bytes] = []

    def read() -> None:
        for _ in range(n):
            got.append(pull.recv(timeout=20))

    reader = threading.Thread(target=read)  # the receiver's I/O thread works while it waits
    reader.start()
    for i in range(n):
        push.send(i.to_bytes(4, "big") * (size // 4), timeout=20)
    reader.join(30)
    return tx, rx, got


def _engine_native(node: a3m.Node) -> bool:
    return type(node._proto).__name__ == "ExonCore"


@contextmanager
def _req_rep(name: str) -> Iterator[tuple[a3m.Node, a3m.Node, a3m.Socket, a3m.Socket]]:
    """A REQ on ``<name>-req`` linked to a REP on ``<name>-rep``: (rep node, req node, rep,
    req), both nodes closed on the way out."""
    with a3m.Node(f"{name}-rep", bind="127.0.0.1:0") as b, \
            a3m.Node(f"{name}-req", bind="127.0.0.1:0") as a:
        rep = b.socket(a3m.REP, "svc")
        a.associate(b.id, b.address)
        req = a.socket(a3m.REQ, "c")
        req.link((b.id, "svc"))
        assert req.wait_linked(timeout=10)
        yield b, a, rep, req


def test_a_stream_through_the_native_loop_is_exact_and_in_order() -> None:
    """Both I/O threads run the native loop: every message arrives once, whole, in order;
    the loops themselves read datagrams (the receiver's data, the sender's ACKs),
    and the sender's output left in order (no fast retransmission on a lossless path)."""
    n, size = 400, 8000
    tx, rx = None, None
    try:
        tx, rx, got = _stream("loop", n, size)
        if not _engine_native(tx):
            pytest.skip("the Python engine was chosen (A3M_ENGINE)")
        assert got == [i.to_bytes(4, "big") * (size // 4) for i in range(n)]
        assert tx._driver._native_loop is not None and rx._driver._native_loop is not None
        # (an application thread waiting on a node leads and reads for itself: the two loops
        # share the reads with the sender's and the reader's threads)
        assert rx._driver.loop_reads + tx._driver.loop_reads > 0
        if rx._driver.rx_drops() == 0:  # nothing lost: a gap the receiver saw was reordering
            assert tx.stats["exon"]["fast_retransmits"] == 0
    finally:
        for node in (tx, rx):
            if node is not None:
                node.close(5)


def test_the_switch_turns_the_loop_off(monkeypatch: pytest.MonkeyPatch) -> None:
    """``A3M_NATIVE_LOOP=0``: the I/O thread selects and runs Python turns, as before."""
    monkeypatch.setenv("A3M_NATIVE_LOOP", "0")
    tx, rx = None, None
    try:
        tx, rx, got = _stream("noloop", 50, 3000)
        assert len(got) == 50
        assert tx._driver._native_loop is None and rx._driver.loop_reads == 0
        assert tx._driver._lead_io is None and tx._driver.lead_reads == 0
    finally:
        for node in (tx, rx):
            if node is not None:
                node.close(5)


def test_a_timer_set_by_an_application_thread_wakes_the_loop() -> None:
    """The loop sleeps until its own deadline while application threads send and set
    earlier timers (a retransmission, a reply's ACK): requests after idle spells, each sent
    while both loops sleep, all complete, and the replies are exact."""
    with _req_rep("wake") as (b, a, rep, req):

        def serve() -> None:
            for _ in range(5):
                rep.send(rep.recv(timeout=20))

        server = threading.Thread(target=serve)
        server.start()
        for i in range(5):
            time.sleep(0.3)  # both loops asleep on their longest deadline
            req.send(b"ping %d" % i, timeout=10)
            assert req.recv(timeout=10) == b"ping %d" % i
        server.join(10)
        assert not server.is_alive()
        assert b.stats["exon"]["delivered"] >= 5


def test_a_waiting_thread_leads_in_one_native_call() -> None:
    """A thread waiting for its reply leads through ``lead_io``: the wait, the reads, the
    opens and Exon's frames in one native call, its Python turn only taking the events.
    Round trips stay exact; the replies were read by those native waits (counted), and a
    leader's wait that read nothing (woken, timed out) still reads in its turn."""
    with _req_rep("lead") as (b, a, rep, req):
        if not _engine_native(a):
            pytest.skip("the Python engine was chosen (A3M_ENGINE)")
        assert a._driver._lead_io is not None
        n = 300

        def serve() -> None:
            for _ in range(n):
                rep.send(rep.recv(timeout=20))

        server = threading.Thread(target=serve)
        server.start()
        leads = a._driver.leader_turns
        for i in range(n):
            req.send(b"q %d" % i, timeout=10)
            assert req.recv(timeout=10) == b"q %d" % i
        server.join(10)
        assert not server.is_alive()
        # Each reply was waited for by the requesting thread (a leader turn per wait), and
        # the native waits read the datagrams those turns handled.
        assert a._driver.leader_turns - leads >= n // 2
        assert a._driver.lead_reads >= n // 2
        assert a._driver.loop_errors == b._driver.loop_errors == 0


def test_an_error_in_the_loop_is_counted_and_the_thread_goes_on(
        caplog: pytest.LogCaptureFixture) -> None:
    """A failure of the native loop (a panic comes out as ``a3m._native.NativePanic``) is
    logged and counted, and the I/O thread goes on: never a silent stall."""
    from a3m import _native

    with a3m.Node("err-rx", bind="127.0.0.1:0") as rx, \
            a3m.Node("err-tx", bind="127.0.0.1:0") as tx:
        drv = rx._driver
        if drv._native_loop is None:
            pytest.skip("no native loop on this engine")
        real, failed = drv._native_loop, [0]

        def failing(*args: object) -> tuple[int, int, float]:
            if not failed[0]:
                failed[0] = 1
                raise _native.NativePanic("a3m native run_io: panic: test")
            return real(*args)  # type: ignore[no-any-return]

        with drv.lock:
            drv._native_loop = failing
            drv.wake()
        pull = rx.socket(a3m.PULL, "in")
        tx.associate(rx.id, rx.address)
        push = tx.socket(a3m.PUSH, "out")
        push.link((rx.id, "in"))
        assert push.wait_linked(timeout=10)
        for i in range(20):
            push.send(b"m%d" % i, timeout=10)
        assert [pull.recv(timeout=10) for _ in range(20)] == [b"m%d" % i for i in range(20)]
        assert failed[0] == 1 and drv.loop_errors == 1
        assert "native I/O loop error" in caplog.text



def test_what_the_loop_leaves_for_python_wakes_a_thread_that_took_the_lead() -> None:
    """The loop reads an answer and comes back to hand it to Python just as the application
    thread starts waiting for it (it leads: it waits on the socket and runs the turn itself).
    The I/O thread steps aside for the leader and must wake it: the answer is no longer in the
    socket the leader waits on, and sat there for about a second, past the survey's deadline
    (the first survey of fresh nodes lost an answer about one time in seven). The deadline
    here is the documented example's, hundreds of times a loopback answer's time."""
    for trial in range(12):
        with a3m.Node("lead-ctl") as ctl, a3m.Node("lead-n1") as n1, \
                a3m.Node("lead-n2") as n2:
            if ctl._driver._native_loop is None:
                pytest.skip("no native loop on this engine")
            sv = ctl.socket(a3m.SURVEYOR, "health", survey_time_s=0.6)
            rs = []
            for n in (n1, n2):
                n.associate(ctl.id, ctl.address)
                r = n.socket(a3m.RESPONDENT, "health")
                r.link((ctl.id, "health"))
                assert r.wait_linked(timeout=10)
                rs.append(r)
            end = time.monotonic() + 10
            while len(sv.links) < 2 and time.monotonic() < end:
                sv.wait_linked(timeout=1)
            sv.send(b"alive? %d" % trial, timeout=10)
            for r in rs:
                assert r.recv(timeout=10) == b"alive? %d" % trial
                r.send(r.id.node.encode(), timeout=10)
            answers = []
            while True:
                try:
                    answers.append(sv.recv(timeout=10))
                except a3m.Timeout:  # the survey's deadline passed
                    break
            assert sorted(answers) == [b"lead-n1", b"lead-n2"], f"survey {trial}"


def test_the_loop_refuses_garbage_before_any_python_runs() -> None:
    """Datagrams the secure layer refuses by its first rules alone (a wrong version, an
    unknown type, a datagram in clear, a sealed one too short or under the index of no
    session) are refused and counted by the native loop as the secure layer counts them:
    none is handed to Python (counted by the loop); the stream after them stays exact."""
    import socket

    from a3m.exon.secure import packets as p

    with push_pull("refuse") as (_, rx, push, pull), \
            socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as attacker:
        if not _engine_native(rx):
            pytest.skip("the Python engine was chosen (A3M_ENGINE)")
        push.send(b"first", timeout=10)
        assert pull.recv(timeout=10) == b"first"  # a live session: the loop opens natively
        left = rx._proto.loop_left()  # datagrams the loops handed to Python
        before = rx.stats["exon"]
        kinds = {
            "malformed": [bytes([p.VERSION + 1]) + bytes(40), b"\x05", bytes([p.VERSION, 0x7F])],
            "truncated": [p.SEALED_HDR.pack(p.VERSION, p.DATA, 1, 1)],
            "unknown_session": [p.SEALED_HDR.pack(p.VERSION, p.DATA, 0xDEAD, 7) + bytes(40)],
            "plain_refused": [bytes([p.VERSION, p.PLAIN]) + bytes(20)],
        }
        rounds = 40
        for _ in range(rounds):
            for datagrams in kinds.values():
                for d in datagrams:
                    attacker.sendto(d, rx.address)
        deadline = time.monotonic() + 10
        garbage = rounds * sum(map(len, kinds.values()))
        while (sum(rx.stats["exon"][k] - before[k] for k in kinds) < garbage
               and time.monotonic() < deadline):
            time.sleep(0.01)
        # None of it went to Python: before, each one did (and a turn with it).
        assert rx._proto.loop_left() == left
        for i in range(100):
            push.send(b"%d" % i, timeout=10)
        assert [pull.recv(timeout=10) for _ in range(100)] == [b"%d" % i for i in range(100)]
        after = rx.stats["exon"]
        for name, datagrams in kinds.items():
            assert after[name] - before[name] == rounds * len(datagrams), name


def test_a_flood_left_to_python_does_not_take_the_stream_with_it() -> None:
    """Handshake datagrams (here forged INITIATEs) go to the Python secure layer, but the
    stream's DATA read in the same batch after them is opened natively, ahead of them, as
    ``receive_datagrams`` takes live sessions first: the loops hand Python no more datagrams
    than the flood sent (before, everything read after the first INITIATE of a batch went
    with it), and the stream stays exact and in order."""
    import random
    import socket

    from a3m.benchmarks.storm import garbage

    flood = garbage("initiate", random.Random(5), 400)
    n = 3000
    stop = threading.Event()
    sent = [0]
    with a3m.Node("flood-rx", bind="127.0.0.1:0", loopback_datagram_size=0) as rx, \
            a3m.Node("flood-tx", bind="127.0.0.1:0", loopback_datagram_size=0) as tx, \
            socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as attacker:
        if not _engine_native(rx):
            pytest.skip("the Python engine was chosen (A3M_ENGINE)")
        pull = rx.socket(a3m.PULL, "in")
        tx.associate(rx.id, rx.address)
        push = tx.socket(a3m.PUSH, "out")
        push.link((rx.id, "in"))
        assert push.wait_linked(timeout=10)
        push.send(b"first", timeout=10)
        assert pull.recv(timeout=10) == b"first"  # the handshake is behind us
        left = rx._proto.loop_left()

        def refused() -> int:  # a forged INITIATE: its cookie checked, or shed under load
            st = rx.stats["exon"]
            return int(st["cookie_invalid"] + st["unauth_shed"])

        refused_before = refused()

        def attack() -> None:
            for d in flood:  # bounded: 400 datagrams, one every 0.2 ms at most
                if stop.is_set():
                    return
                attacker.sendto(d, rx.address)
                sent[0] += 1
                time.sleep(0.0002)

        got: list[bytes] = []

        def read() -> None:
            for _ in range(n):
                got.append(pull.recv(timeout=20))

        threads = [threading.Thread(target=attack), threading.Thread(target=read)]
        for t in threads:
            t.start()
        try:
            for i in range(n):
                push.send(i.to_bytes(4, "big") * 250, timeout=20)
            threads[1].join(30)
        finally:
            stop.set()
            threads[0].join(10)
        deadline = time.monotonic() + 10
        while refused() - refused_before < sent[0] and time.monotonic() < deadline:
            time.sleep(0.01)
        assert sent[0] > 0 and refused() - refused_before == sent[0]
        assert rx._proto.loop_left() - left <= sent[0]
    assert got == [i.to_bytes(4, "big") * 250 for i in range(n)]


def test_a_round_trip_runs_few_interpreted_functions_a_process() -> None:
    """Issue 39's count: a REQ/REP round trip runs at most 8 interpreted Python functions in
    each process (the compiled runtime's wait, turn, hooks and after-call run none; what
    is left is the socket's own ``send``, ``recv`` and ``_take``). Both nodes live in this
    process here, so the budget is twice that; every thread is counted (the profile hook is
    set before the nodes start their I/O threads)."""
    if not a3m.COMPILED:
        pytest.skip("the compiled fast path is not built (its Python sources run)")
    calls = [0]

    def prof(frame: object, event: str, arg: object) -> None:
        if event == "call":
            calls[0] += 1

    n = 300
    threading.setprofile(prof)
    sys.setprofile(prof)
    try:
        with _req_rep("calls") as (b, a, rep, req):
            if not _engine_native(a):
                pytest.skip("the Python engine was chosen (A3M_ENGINE)")

            def serve() -> None:
                for _ in range(n + 20):
                    rep.send(rep.recv(timeout=20))

            server = threading.Thread(target=serve)
            server.start()
            for _ in range(20):
                req.send(b"x" * 64)
                req.recv(timeout=20)
            start = calls[0]
            for _ in range(n):
                req.send(b"x" * 64)
                assert req.recv(timeout=20) == b"x" * 64
            per_round_trip = (calls[0] - start) / n
            server.join(30)
    finally:
        sys.setprofile(None)
        threading.setprofile(None)  # type: ignore[arg-type]
    assert per_round_trip <= 2 * 8, per_round_trip
