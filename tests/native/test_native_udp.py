"""The native batched UDP I/O (``a3m._native.UdpIo``: recvmmsg with GRO, GSO runs, sendmmsg)
against its Python twin (``a3m.runtime.offload.UdpOffload``), over real loopback sockets:
the same datagrams arrive in order from the same source address tuples whichever twin sends
and whichever reads (IPv4, and IPv6 ``::1`` where the machine has it), GSO runs read back
exact, an empty socket reads nothing, a closed one raises OSError, a host name goes through
the socket's own ``sendto``, and the counters count the calls.

No test assumes the machine's speed: a datagram is waited for (``select``) up to a deadline
only a defect reaches, and nothing is timed.
"""

from __future__ import annotations

import select
import socket
import time
from collections.abc import Iterator
from typing import Any

import pytest

from a3m.runtime.offload import UdpOffload

from .twins import native

DEADLINE_S = 30.0
TWINS = ["python", "native"]
COUNTER_NAMES = {"recv_calls", "recv_datagrams", "gro_reads", "send_calls", "send_datagrams",
                 "gso_sends", "gso_datagrams", "send_errors", "recv_errors"}


def _ipv6() -> bool:
    if not socket.has_ipv6:
        return False
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_DGRAM) as s:
            s.bind(("::1", 0))
    except OSError:
        return False
    return True


FAMILIES = [pytest.param(socket.AF_INET, id="ipv4"),
            pytest.param(socket.AF_INET6, id="ipv6", marks=pytest.mark.skipif(
                not _ipv6(), reason="no IPv6 loopback (::1) on this machine"))]


@pytest.fixture
def sockets() -> Iterator[Any]:
    """A maker of non-blocking UDP sockets on the loopback (closed after the test)."""
    made: list[socket.socket] = []

    def make(family: int = socket.AF_INET) -> socket.socket:
        s = socket.socket(family, socket.SOCK_DGRAM)
        made.append(s)
        # Room for a whole batch: nothing is read while a test sends.
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
        s.bind(("127.0.0.1" if family == socket.AF_INET else "::1", 0))
        s.setblocking(False)
        return s

    yield make
    for s in made:
        s.close()


def io_for(twin: str, sock: socket.socket, gso: bool = True, gro: bool = True) -> Any:
    return native.UdpIo(sock, gso=gso, gro=gro) if twin == "native" else \
        UdpOffload(sock, gso=gso, gro=gro)


class Reader:
    """One call reads what one twin's read gives: the native ``recv(max)`` (``[]``: none
    waits), or the Python twin's ``reader(buf)()`` (``BlockingIOError``: none waits)."""

    def __init__(self, twin: str, sock: socket.socket, gro: bool = True) -> None:
        self.sock = sock
        self.io = io_for(twin, sock, gso=False, gro=gro)
        self.twin = twin
        if twin == "python":
            self._read = self.io.reader(bytearray(65536))

    def read(self) -> list[tuple[bytes, Any]]:
        if self.twin == "native":
            got: list[tuple[bytes, Any]] = self.io.recv(512)
            return got
        try:
            return list(self._read())
        except BlockingIOError:
            return []

    def collect(self, want: int) -> list[tuple[bytes, Any]]:
        """Read until ``want`` datagrams came (or the deadline), then once more: extras
        would show."""
        got: list[tuple[bytes, Any]] = []
        end = time.monotonic() + DEADLINE_S
        while len(got) < want:
            batch = self.read()
            got.extend(batch)
            if not batch and len(got) < want:
                left = end - time.monotonic()
                assert left > 0, f"{len(got)} of {want} datagrams after {DEADLINE_S} s"
                select.select([self.sock], [], [], min(left, 1.0))
        got.extend(self.read())
        return got


def payloads(sizes: list[int], tag: int = 0) -> list[bytes]:
    """Datagrams of these sizes, each with its number in its bytes (a swap would show)."""
    return [bytes(((i * 7 + k + tag) % 256) for k in range(n)) for i, n in enumerate(sizes)]


#: A batch with singles of mixed sizes and GSO runs (equal sizes, the last shorter).
MIXED = ([1400] * 12 + [700] + [64, 1200, 3, 9000, 1] + [512] * 5 + [100, 1500]
         + [2000] * 40 + [17] + [1] * 3)


# ------------------------------------------------------------------ the same datagrams

@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("sender", TWINS)
@pytest.mark.parametrize("receiver", TWINS)
@pytest.mark.parametrize("offload", [True, False], ids=["offload", "plain"])
def test_the_same_datagrams_arrive_in_order(sockets: Any, family: int, sender: str,
                                            receiver: str, offload: bool) -> None:
    tx, rx = sockets(family), sockets(family)
    out = [(d, rx.getsockname()) for d in payloads(MIXED)]
    sent = io_for(sender, tx, gso=offload, gro=offload)
    assert sent.send(out) == 0
    got = Reader(receiver, rx, gro=offload).collect(len(out))
    source = tx.getsockname()
    assert [len(d) for d, _ in got] == MIXED
    assert got == [(d, source) for d, _ in out]
    assert all(type(a) is tuple and len(a) == len(source) for _, a in got)


@pytest.mark.parametrize("family", FAMILIES)
def test_both_readers_give_the_same_list(sockets: Any, family: int) -> None:
    """The same sends read by each twin: equal lists, address tuples equal in every field."""
    tx = sockets(family)
    lists = []
    for twin in TWINS:
        rx = sockets(family)
        out = [(d, rx.getsockname()) for d in payloads(MIXED, 3)]
        assert io_for("native", tx).send(out) == 0
        lists.append(Reader(twin, rx).collect(len(out)))
    assert lists[0] == lists[1]
    assert [type(x) for _, a in lists[0] for x in a] == [type(x) for _, a in lists[1] for x in a]


def test_datagrams_to_several_addresses_keep_their_order(sockets: Any) -> None:
    tx, rx1, rx2 = sockets(), sockets(), sockets()
    a1, a2 = rx1.getsockname(), rx2.getsockname()
    for twin in TWINS:
        data = payloads([300] * 30, 11)
        # runs to one address interleaved with the other's: no datagram jumps another
        out = [(d, a1 if (i // 4) % 2 else a2) for i, d in enumerate(data)]
        assert io_for(twin, tx).send(out) == 0
        src = tx.getsockname()
        to1 = [(d, src) for d, a in out if a == a1]
        to2 = [(d, src) for d, a in out if a == a2]
        assert Reader("native", rx1).collect(len(to1)) == to1
        assert Reader("python", rx2).collect(len(to2)) == to2


# ------------------------------------------------------------------ GSO runs

RUNS = [
    [1400] * 10 + [700],           # a run, last shorter
    [1000] * 64 + [1000] * 6,      # more than one send carries (64 segments)
    [1400] * 46 + [1400] * 10,     # more than 65000 bytes
    [200] * 3 + [100] + [100] * 2,  # a shorter one ends a run; the next starts
    [1] * 5,
    [65000, 64, 64],
]


@pytest.mark.parametrize("sizes", RUNS, ids=[f"run{i}" for i in range(len(RUNS))])
@pytest.mark.parametrize("gro", [True, False], ids=["gro", "nogro"])
def test_gso_runs_read_back_exact(sockets: Any, sizes: list[int], gro: bool) -> None:
    gso_counts = {}
    for sender in TWINS:
        for receiver in TWINS:
            tx, rx = sockets(), sockets()
            data = payloads(sizes, len(sizes))
            io = io_for(sender, tx)
            assert io.send([(d, rx.getsockname()) for d in data]) == 0
            got = Reader(receiver, rx, gro=gro).collect(len(data))
            assert got == [(d, tx.getsockname()) for d in data], (sender, receiver)
            gso_counts[sender] = (io.gso, io.gso_sends, io.gso_datagrams, io.gso_refused)
    # the twins cut the batch into the same segmented sends
    assert gso_counts["native"] == gso_counts["python"]


def test_the_twins_agree_on_offload_support(sockets: Any) -> None:
    for gso in (True, False):
        for gro in (True, False):
            nat = native.UdpIo(sockets(), gso=gso, gro=gro)
            py = UdpOffload(sockets(), gso=gso, gro=gro)
            assert (nat.gso, nat.gro) == (py.gso, py.gro), (gso, gro)
            assert (nat.gso_sends, nat.gso_datagrams, nat.gro_reads, nat.gso_refused) == (
                0, 0, 0, 0)


@pytest.mark.parametrize("sizes", [[0, 0], [2, 0], [5, 5, 0]])
def test_empty_datagrams_arrive_from_both(sockets: Any, sizes: list[int]) -> None:
    lengths = {}
    for twin in TWINS:
        tx, rx = sockets(), sockets()
        io = io_for(twin, tx)
        if not io.gso:
            pytest.skip("no GSO here: the divergence needs a segmented send")
        assert io.send([(d, rx.getsockname()) for d in payloads(sizes)]) == 0
        # then a marker, from the same socket: what the batch carried arrived before it
        tx.sendto(b"marker", rx.getsockname())
        reader, got = Reader("native", rx), []
        while not got or got[-1][0] != b"marker":
            got.extend(reader.collect(1))
        lengths[twin] = [len(d) for d, _ in got[:-1]]
    assert lengths["native"] == sizes
    assert lengths["python"] == sizes


# ------------------------------------------------------------------ empty, closed

@pytest.mark.parametrize("gro", [True, False], ids=["gro", "nogro"])
def test_an_empty_socket_reads_nothing(sockets: Any, gro: bool) -> None:
    nat = native.UdpIo(sockets(), gso=False, gro=gro)
    assert nat.recv() == [] and nat.recv(1) == []
    assert nat.counters()["recv_calls"] == 2 and nat.counters()["recv_datagrams"] == 0
    # the twin's read raises as recvfrom_into does (its driver catches it)
    py = UdpOffload(sockets(), gso=False, gro=gro)
    with pytest.raises(BlockingIOError):
        py.reader(bytearray(65536))()


@pytest.mark.parametrize("twin", TWINS)
def test_a_closed_socket_raises_oserror_on_read(sockets: Any, twin: str) -> None:
    sock = sockets()
    reader = Reader(twin, sock)
    sock.close()
    with pytest.raises(OSError):
        if twin == "native":
            reader.io.recv()
        else:
            reader.io.reader(bytearray(65536))()


def test_a_closed_socket_fails_every_native_send(sockets: Any) -> None:
    tx, rx = sockets(), sockets()
    io = native.UdpIo(tx)
    tx.close()
    assert io.send([(b"x", rx.getsockname())]) == 1  # (counted, as the twin counts them)
    assert io.counters()["send_errors"] == 1


def test_send_on_a_closed_socket_is_the_same_in_both(sockets: Any) -> None:
    results = {}
    for twin in TWINS:
        tx, rx = sockets(), sockets()
        io = io_for(twin, tx)
        tx.close()
        results[twin] = io.send([(b"x", rx.getsockname()), (b"y", rx.getsockname())])
    assert results["native"] == results["python"]


# ------------------------------------------------------------------ host names

@pytest.mark.parametrize("twin", TWINS)
def test_a_host_name_goes_through_the_sockets_sendto(sockets: Any, twin: str) -> None:
    """``("localhost", port)`` is not a numeric address: the native twin hands it to the
    socket's sendto, after what came before it, and goes on with the next."""
    try:
        socket.getaddrinfo("localhost", 1, socket.AF_INET, socket.SOCK_DGRAM)
    except OSError:
        pytest.skip("localhost does not resolve here")
    tx, rx = sockets(), sockets()
    port = rx.getsockname()[1]
    data = payloads([10, 10, 10, 20, 20, 5], 5)
    out = [(data[0], ("127.0.0.1", port)), (data[1], ("127.0.0.1", port)),
           (data[2], ("localhost", port)), (data[3], ("127.0.0.1", port)),
           (data[4], ("localhost", port)), (data[5], ("localhost", port))]
    assert io_for(twin, tx).send(out) == 0
    got = Reader("python", rx).collect(len(out))
    assert got == [(d, tx.getsockname()) for d in data]


# ------------------------------------------------------------------ counters

def test_counters_count_the_calls(sockets: Any) -> None:
    tx, rx = sockets(), sockets()
    io = native.UdpIo(tx, gso=True, gro=False)
    c = io.counters()
    assert set(c) == COUNTER_NAMES and all(v == 0 for v in c.values())
    assert io.recv() == []
    assert io.counters()["recv_calls"] == 1
    to = rx.getsockname()
    # singles (each longer than the one before: no run): one sendmmsg
    singles = payloads([10, 20, 30, 40, 50])
    assert io.send([(d, to) for d in singles]) == 0
    c = io.counters()
    assert (c["send_calls"], c["send_datagrams"], c["gso_sends"], c["send_errors"]) == (
        1, 5, 0, 0)
    # a run: one segmented send where the kernel has GSO, else one sendmmsg
    run = payloads([100] * 4 + [60], 1)
    assert io.send([(d, to) for d in run]) == 0
    c = io.counters()
    assert c["send_calls"] == 2 and c["send_datagrams"] == 10
    assert (c["gso_sends"], c["gso_datagrams"]) == ((1, 5) if io.gso else (0, 0))
    assert (io.gso_sends, io.gso_datagrams) == (c["gso_sends"], c["gso_datagrams"])
    # the twin counts its segmented sends alike
    py = UdpOffload(sockets(), gso=True, gro=False)
    assert py.send([(d, to) for d in singles + run]) == 0
    assert (py.gso_sends, py.gso_datagrams) == (c["gso_sends"], c["gso_datagrams"])
    # the reads: all 20 datagrams, counted
    reader = Reader("native", rx, gro=False)
    got = reader.collect(20)
    assert [d for d, _ in got] == singles + run + singles + run
    rc = reader.io.counters()
    assert rc["recv_datagrams"] == 20 and 1 <= rc["recv_calls"] <= 21
    assert rc["recv_errors"] == 0 and rc["send_calls"] == 0


def test_a_coalesced_read_is_counted(sockets: Any) -> None:
    tx = sockets()
    counts = {}
    for twin in TWINS:
        rx = sockets()
        sender = native.UdpIo(tx, gso=True, gro=False)
        if not sender.gso:
            pytest.skip("no GSO here")
        reader = Reader(twin, rx, gro=True)
        if not reader.io.gro:
            pytest.skip("no GRO here")
        data = payloads([1000] * 8 + [10], 2)
        assert sender.send([(d, rx.getsockname()) for d in data]) == 0
        assert reader.collect(len(data)) == [(d, tx.getsockname()) for d in data]
        counts[twin] = reader.io.gro_reads
    assert counts["native"] == counts["python"]


def test_the_send_order_taken_and_released_with_nobody_waiting_makes_no_system_call(
        sockets: Any) -> None:
    """The send order is taken and released twice a message on a round trip's path; with no
    thread waiting for it, that costs no system call (a release woke a waiter through
    ``futex`` every time, waiter or not: 4 of a round trip's 11). Counted by perf where it may
    trace here. That a release still wakes a thread that waits is the cargo test's
    (``order_lock.rs``: it waits until the waiter is counted, then releases)."""
    from a3m.benchmarks.syscalls import SyscallCounter

    order = native.UdpIo(sockets(), gso=False, gro=False).send_order
    counter = SyscallCounter()
    if not counter.attached:
        pytest.skip(f"perf cannot count here: {counter.why}")
    counter.enable()
    for _ in range(2000):
        with order:
            pass
        assert order.acquire()
        order.release()
    counter.disable()
    got = counter.stop()
    assert got is not None and got < 100, got  # (was more than 4 000)
    assert order.acquire(blocking=False)  # released: free again
    assert not order.acquire(blocking=False)  # held: not taken twice
    order.release()
