"""The native handshake budgets (``a3m._native.HandshakeMeter``, what the native reads shed a
HELLO flood from) against their Python twin (``a3m.exon.secure.meter.HandshakeMeter``): the
same calls give the same verdicts and the same state, bit for bit; and a running node sheds
a flood's token-less HELLOs before any Python runs, counting each one."""

from __future__ import annotations

from random import Random
from typing import Any

import pytest

import a3m
from a3m._dataplane import native
from a3m.exon.secure import packets as p
from a3m.exon.secure.meter import MAX_SOURCES, HandshakeMeter, new_meter

from .floods import flood, settle, sources

pytestmark = pytest.mark.skipif(native is None, reason="the native data plane is not built")

# Addresses as the runtime and the simulator give them: IPv4 and IPv6 tuples (three hosts of
# one /64, one of another, one with a scope), a host that is no address, a simulator's name.
_ADDRS: list[Any] = [
    ("192.0.2.1", 1000), ("192.0.2.1", 1001), ("192.0.2.2", 7), ("10.0.0.9", 9),
    ("2001:db8::1", 5, 0, 0), ("2001:db8::ffff:1", 6, 0, 0), ("2001:db8::2%eth0", 7, 0, 3),
    ("2001:db8:0:1::1", 5, 0, 0), ("[not-an-address", 1), "node-7", ("node-8",), 17,
]


def _same(py: HandshakeMeter, rs: Any, addr: Any, where: Any) -> None:
    assert py.state() == rs.state(), where
    assert py.budget_of(addr) == rs.budget_of(addr), where
    assert py.source_count() == rs.source_count(), where


@pytest.mark.parametrize("seed", range(40))
def test_the_native_meter_decides_as_its_twin(seed: int) -> None:
    rng = Random(seed)
    rate = rng.choice([0.0, 1.0, 50.0, 1000.0])
    retry_rate = rng.choice([0.0, 5.0, 2000.0])
    py, rs = HandshakeMeter(rate, retry_rate), native.HandshakeMeter(rate, retry_rate)
    many = seed % 8 == 0  # beyond MAX_SOURCES: sources forgotten, idle first, then all
    now = rng.uniform(0, 1e6)
    for step in range(3000 if not many else 3 * MAX_SOURCES):
        # mostly a flood's pace (in debt, under load), now and then a pause or the same time
        now += rng.choice([0.0, 1e-5, 1e-4, 1e-3, rng.expovariate(2.0)])
        addr = (f"198.51.{step % 40}.{step % 251}", 1) if many else rng.choice(_ADDRS)
        if rng.random() < 0.6:
            a, b = py.hello(addr, now), rs.hello(addr, now)
        else:
            cost = rng.choice([1.0, 0.05, rng.random()])
            a, b = py.source_ok(addr, now, cost), rs.source_ok(addr, now, cost)
        assert a == b, (seed, step)
        _same(py, rs, addr, (seed, step))


def test_the_node_s_secure_layer_meters_with_the_native_twin() -> None:
    assert isinstance(new_meter(1000.0, 2000.0), native.HandshakeMeter)


def _hello(rng: Random) -> bytes:
    head = p.HELLO_HDR.pack(p.VERSION, p.HELLO, 0) + rng.randbytes(36)
    return head + bytes(p.HELLO_SIZE - len(head))


def _counted(st: dict[str, int]) -> int:
    """HELLOs a node has dealt with: shed, sent a RETRY, answered (or failed to)."""
    return (st["unauth_shed"] + st["retries_sent"] + st["hellos_answered"]
            + st["handshake_failed"])


def test_a_hello_flood_is_shed_natively_and_every_hello_counted() -> None:
    """12 000 token-less HELLOs from 8 addresses at a node whose budgets allow no key
    exchange and no RETRY (``handshake_rate=1``: a burst of 0.1 exchange; ``retry_rate=0``):
    every HELLO is shed by the native reads, none reaches Python (``hellos_shed`` counts
    them all), and each is counted once."""
    rng = Random(5)
    n = 12_000
    with a3m.Node("meter-rx", handshake_rate=1.0, retry_rate=0.0) as node:
        proto = node._driver.proto
        if not hasattr(proto, "hellos_shed"):
            pytest.skip("the Python engine runs (A3M_ENGINE=python)")
        with sources(8, 20) as socks:
            flood(socks, node.address, (_hello(rng) for _ in range(n)))
            st, drops = settle(node, _counted, n)
            shed = proto.hellos_shed()
    assert st["malformed"] == 0 and st["truncated"] == 0
    assert st["hellos_answered"] == 0 and st["retries_sent"] == 0
    assert _counted(st) == n - drops
    assert shed == st["unauth_shed"] == n - drops  # (all of them, natively)


def test_a_flood_reaches_python_only_with_the_hellos_it_answers() -> None:
    """Token-less HELLOs, each followed by garbage the secure layer's first rules refuse
    (sealed under an index of no session, a wrong version, a datagram in clear): the native
    reads shed the HELLOs the budgets refuse, answer those they give a RETRY, and refuse the
    garbage, by whichever read they come (the native loop's, a turn's), and behind a HELLO
    left to Python too (a HELLO installs no session). Python is handed only the HELLOs it
    answers with a key exchange (and those the jar's rotation leaves it: none here)."""
    rng = Random(9)
    pairs = 4000
    junk = [p.SEALED_HDR.pack(p.VERSION, p.DATA, 0xBAD0000 + i, 1) + bytes(48) for i in range(7)]
    junk += [bytes([p.VERSION + 1]) + bytes(40), bytes([p.VERSION, p.PLAIN]) + bytes(20)]
    with a3m.Node("meter-flood") as node, sources(1, 1) as attacker:
        proto = node._driver.proto
        if not hasattr(proto, "secure_python"):
            pytest.skip("the Python engine runs (A3M_ENGINE=python)")
        before = proto.secure_python()
        flood(attacker, node.address,
              (d for k in range(pairs) for d in (_hello(rng), junk[k % len(junk)])))
        st, drops = settle(node, lambda st: _counted(st) + st["unknown_session"]
                           + st["malformed"] + st["plain_refused"], 2 * pairs)
        handed = proto.secure_python() - before
    assert _counted(st) + st["unknown_session"] + st["malformed"] + st["plain_refused"] \
        == 2 * pairs - drops
    assert st["retries_sent"] > 0
    assert handed == st["hellos_answered"] + st["handshake_failed"]
