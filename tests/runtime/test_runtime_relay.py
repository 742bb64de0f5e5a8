"""FaultRelay on its own, with plain UDP sockets: routing both ways, counters, seeded faults.

No wait here depends on the machine's speed: a test waits for the datagrams or counts it
expects (bounded by WAIT, generous), and only the look for extra datagrams after them is short
(a slow machine can only make that look miss an extra, never fail a correct relay)."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest

from a3m.testing.relay import FaultRelay

Addr = tuple[str, int]
WAIT = 30.0  # seconds: a bound for what must come, never reached by a working relay


@contextmanager
def udp() -> Iterator[socket.socket]:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)  # small datagrams cost ~1 KiB
    s.bind(("127.0.0.1", 0))
    s.settimeout(WAIT)
    try:
        yield s
    finally:
        s.close()


def drain(s: socket.socket, quiet_s: float = 0.3) -> list[tuple[bytes, Addr]]:
    """Everything that arrives until ``quiet_s`` passes without a datagram (a look for
    extras: what a test expects, it takes first with ``take``)."""
    out: list[tuple[bytes, Addr]] = []
    s.settimeout(quiet_s)
    try:
        while True:
            try:
                data, src = s.recvfrom(65536)
            except TimeoutError:
                return out
            out.append((data, src))
    finally:
        s.settimeout(WAIT)


def take(s: socket.socket, n: int) -> list[tuple[bytes, Addr]]:
    """``n`` datagrams (each within WAIT), then whatever else comes (``drain``)."""
    out = [s.recvfrom(65536) for _ in range(n)]
    return out + drain(s)


def wait_for(done: Callable[[], bool]) -> None:
    """Wait for a counter the relay's thread moves (bounded by WAIT)."""
    deadline = time.monotonic() + WAIT
    while not done() and time.monotonic() < deadline:
        time.sleep(0.001)


def blast(client: socket.socket, front: Addr, n: int, pace_every: int = 50) -> None:
    for i in range(n):
        client.sendto(b"%d" % i, front)
        if i % pace_every == pace_every - 1:
            time.sleep(0.002)  # keep well inside the kernel buffers


def test_clean_relay_forwards_both_ways_through_the_front() -> None:
    with udp() as target, udp() as client, FaultRelay({"t": target.getsockname()}) as relay:
        front = relay.front("t")
        assert front != target.getsockname()
        blast(client, front, 300)
        got = take(target, 300)
        assert [d for d, _ in got] == [b"%d" % i for i in range(300)]  # no faults: in order
        back = {src for _, src in got}
        assert len(back) == 1 and back != {client.getsockname()}  # the relay stands for it
        target.sendto(b"reply", back.pop())
        data, src = client.recvfrom(100)
        assert data == b"reply" and src == front  # the reply leaves from the front used
        st = relay.stats
        wait_for(lambda: st.forwarded >= 301)  # the relay counts just after its sendto returns
        assert (st.received, st.forwarded, st.dropped, st.duplicated, st.reordered) == \
            (301, 301, 0, 0, 0)


def test_each_client_gets_its_own_back_address() -> None:
    with udp() as target, udp() as c1, udp() as c2, \
            FaultRelay({"t": target.getsockname()}) as relay:
        front = relay.front("t")
        c1.sendto(b"one", front)
        c2.sendto(b"two", front)
        got = dict(take(target, 2))
        assert set(got) == {b"one", b"two"} and got[b"one"] != got[b"two"]
        target.sendto(b"to-one", got[b"one"])
        target.sendto(b"to-two", got[b"two"])
        assert c1.recvfrom(100)[0] == b"to-one"
        assert c2.recvfrom(100)[0] == b"to-two"


def test_total_loss_and_total_duplication_are_counted() -> None:
    with udp() as target, udp() as client, \
            FaultRelay({"t": target.getsockname()}, loss=1.0) as relay:
        blast(client, relay.front("t"), 100)
        wait_for(lambda: relay.stats.received >= 100)
        assert drain(target) == []
        assert relay.stats.received == relay.stats.dropped == 100
        assert relay.stats.forwarded == 0
    with udp() as target, udp() as client, \
            FaultRelay({"t": target.getsockname()}, dup=1.0) as relay:
        blast(client, relay.front("t"), 100)
        got = [d for d, _ in take(target, 200)]
        assert sorted(got) == sorted([b"%d" % i for i in range(100)] * 2)
        assert relay.stats.duplicated == 100 and relay.stats.forwarded == 200


def test_reorder_holds_datagrams_back_but_delivers_them_all() -> None:
    with udp() as target, udp() as client, FaultRelay(
            {"t": target.getsockname()}, reorder=1.0, reorder_delay_s=0.05, seed=2) as relay:
        blast(client, relay.front("t"), 200, pace_every=200)
        want = [b"%d" % i for i in range(200)]
        # Ours only: a node of another test may still send to a port the relay now has (a
        # stray datagram of that kind broke this test once); the relay forwards it too.
        got = [d for d, _ in take(target, 200) if d in set(want)]
        assert sorted(got) == sorted(want) and got != want
        assert relay.stats.reordered == relay.stats.forwarded >= 200


def _arrivals(seed: int) -> set[bytes]:
    """Datagrams one at a time (so the relay sees them in this order) through loss 0.5."""
    with udp() as target, udp() as client, FaultRelay(
            {"t": target.getsockname()}, loss=0.5, seed=seed) as relay:
        front = relay.front("t")
        for i in range(120):
            before = relay.stats.received
            client.sendto(b"%d" % i, front)
            wait_for(lambda: relay.stats.received > before)  # noqa: B023 (waited on here)
        wait_for(lambda: relay.stats.forwarded + relay.stats.dropped >= 120)
        got = {d for d, _ in take(target, relay.stats.forwarded)}
        assert relay.stats.received == 120
        assert len(got) == relay.stats.forwarded == 120 - relay.stats.dropped
        return got


def test_faults_are_reproducible_from_the_seed() -> None:
    first, again, other = _arrivals(11), _arrivals(11), _arrivals(12)
    assert first == again
    assert first != other
    assert 30 < len(first) < 90  # about half


def test_probabilities_are_checked() -> None:
    with pytest.raises(ValueError):
        FaultRelay({}, loss=-0.1)
    with pytest.raises(ValueError):
        FaultRelay({}, dup=1.5)
    with pytest.raises(ValueError):
        FaultRelay({}, reorder=2.0)
