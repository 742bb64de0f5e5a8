"""The native check of an INITIATE's cookie (``a3m._native.CookieKeys``, what the native reads
refuse a forged INITIATE with) against its twin (``CookieJar.open``): the same secrets, cookies
and times give the same answers, across rotations; the RETRY the native reads answer a HELLO
with is the responder's, byte for byte, or none when the jar replaces its secret first; a
running node refuses a flood of forged INITIATEs before any Python runs, counting each one,
and a native RETRY's token proves its address to the responder."""

from __future__ import annotations

from collections import deque
from random import Random
from typing import Any

import pytest

import a3m
from a3m._dataplane import native
from a3m.exon.secure import NodeKey, SecureLayer, TrustStore
from a3m.exon.secure import handshake as hs
from a3m.exon.secure import packets as p
from a3m.exon.secure.cookies import (
    COOKIE_LIFETIME_S,
    SECRET_ROTATION_S,
    CookieJar,
    new_cookie_keys,
)
from a3m.exon.secure.meter import RETRY
from a3m.exon.secure.responder import _addr_bytes
from a3m.exon.state import ExonStats

from .floods import flood, settle, sources

pytestmark = pytest.mark.skipif(native is None, reason="the native data plane is not built")

# Address tuples as the native reads hand them to the secure layer (``UdpIo.addr_object``).
_ADDRS: list[Any] = [("127.0.0.1", 5000), ("192.0.2.7", 1), ("::1", 7, 0, 0),
                     ("2001:db8::1", 65535, 0, 3), ("::ffff:192.0.2.1", 9, 0, 0)]


def _initiate(index: int, e: bytes, cookie: bytes, tail: int = 80) -> bytes:
    return p.INITIATE_HDR.pack(p.VERSION, p.INITIATE, index) + e + cookie + bytes(tail)


@pytest.mark.parametrize("seed", range(12))
def test_the_native_check_opens_what_the_jar_opens(seed: int) -> None:
    """Cookies sealed over several rotations, then opened (as made, tampered, bound to
    another address or handshake, with another epoch, early, late): the twin's answer is the
    jar's every time, and so is an INITIATE's check from its address."""
    rng = Random(seed)
    twin = native.CookieKeys()
    jar = CookieJar(rng.randbytes, twin)
    now = rng.uniform(0, 1e5)
    made: list[tuple[bytes, bytes, Any, bytes, int, float]] = []
    seen: set[str | None] = set()
    for step in range(400):
        now += rng.choice([0.0, 0.01, 1.0, 7.0, 30.0, 61.0])
        if rng.random() < 0.3 or not made:
            addr = rng.choice(_ADDRS)
            e, index = rng.randbytes(32), rng.getrandbits(32)
            bound = _addr_bytes(addr) + e + hs.INDEX.pack(index)
            made.append((jar.seal(rng.randbytes(32), rng.getrandbits(32), bound, now), bound,
                         addr, e, index, now))
            assert len(twin) == len(jar._secrets)
            continue
        cookie, bound, addr, e, index, at = rng.choice(made)
        kind = rng.randrange(6)
        if kind == 1:  # tampered
            i = rng.randrange(len(cookie))
            cookie = cookie[:i] + bytes([cookie[i] ^ (1 << rng.randrange(8))]) + cookie[i + 1:]
        elif kind == 2:  # another address
            addr = rng.choice([a for a in _ADDRS if a != addr])
            bound = _addr_bytes(addr) + e + hs.INDEX.pack(index)
        elif kind == 3:  # another epoch's secret
            cookie = bytes([(cookie[0] + rng.choice([1, 2, 255])) & 0xFF]) + cookie[1:]
        when = rng.choice([now, at, at + COOKIE_LIFETIME_S, at + COOKIE_LIFETIME_S + 0.5,
                           at - 1.0])
        want = jar.open(cookie, bound, when) is not None
        assert twin.opens(cookie, bound, when) == want, (seed, step)
        check = twin.check_initiate(_initiate(index, e, cookie), addr, when)
        seen.add(check)
        assert (check == "valid") == want, (seed, step)
        assert check != "early" or when < at, (seed, step)  # (left to the responder)
    assert seen == {"valid", "invalid", "early"}, seed  # (each answer was put to the test)


def _hello(e: bytes, index: int, token: bytes = b"") -> bytes:
    head = p.HELLO_HDR.pack(p.VERSION, p.HELLO, len(token)) + token + e + hs.INDEX.pack(index)
    return head + bytes(p.HELLO_SIZE - len(head))


@pytest.mark.parametrize("seed", range(8))
def test_the_native_retry_is_the_responder_s(seed: int) -> None:
    """Token-less HELLOs the budgets give a RETRY, over rotations of the jar's secrets: what
    the native reads would send (asked before the responder runs) is the responder's RETRY,
    byte for byte, unless the jar replaces its newest secret first (then none: the HELLO is
    left to the responder, which rotates); asked after, it is the responder's always."""
    rng = Random(seed)
    stats = ExonStats()
    sec = SecureLayer("rx", NodeKey.generate(rng.randbytes), TrustStore(), rng.randbytes, stats,
                      deque(), lambda peer, addr: None)
    twin = sec.cookie_keys()
    assert isinstance(twin, native.CookieKeys)
    now = rng.uniform(0, 1e5)
    seen = set()
    for step in range(300):
        now += rng.choice([0.0, 0.001, 1.0, 7.0, 30.0, SECRET_ROTATION_S])
        addr = rng.choice(_ADDRS)
        hello = _hello(rng.randbytes(32), rng.getrandbits(32))
        before = twin.retry(hello, addr, now)
        sent = stats.retries_sent
        sec.open_hello(hello, addr, now, RETRY)
        (retry, to), = sec.take_control()
        assert to == addr and retry[1] == p.RETRY and stats.retries_sent == sent + 1
        assert before is None or before == retry, (seed, step)
        assert twin.retry(hello, addr, now) == retry, (seed, step)
        seen.add(before is None)
    assert seen == {True, False}, seed  # (both answers were put to the test)


def test_a_truncated_initiate_is_left_to_the_responder_s_count() -> None:
    twin = native.CookieKeys()
    assert twin.check_initiate(_initiate(1, bytes(32), bytes(71), 0), ("127.0.0.1", 1),
                               0.0) is None
    assert twin.check_initiate(_initiate(1, bytes(32), bytes(72), 0), ("127.0.0.1", 1),
                               0.0) == "invalid"  # (no secret yet: nothing opens)


def test_the_node_s_jar_tells_its_twin() -> None:
    assert isinstance(new_cookie_keys(), native.CookieKeys)
    with a3m.Node("cookie-twin") as node:
        sec = node._driver.proto.secure
        assert sec.cookie_keys() is sec._jar.twin is not None


def test_a_forged_initiate_flood_is_refused_natively_and_counted() -> None:
    """8 000 INITIATEs with forged cookies (each names one of the node's epochs or another)
    from 8 addresses, with truncated ones among them: the native reads refuse every one
    (``initiates_refused``), none reaches Python, each is counted once (``cookie_invalid``
    or ``truncated``), and no source's budget is spent (a peer links meanwhile)."""
    rng = Random(3)
    n = 8_000
    with a3m.Node("cookie-rx") as node:
        proto = node._driver.proto
        if not hasattr(proto, "initiates_refused"):
            pytest.skip("the Python engine runs (A3M_ENGINE=python)")
        before = proto.secure_python()

        def initiate(k: int) -> bytes:
            cookie = bytes([rng.randrange(4)]) + rng.randbytes(71)
            if k % 10 == 9:  # truncated
                return _initiate(k, rng.randbytes(32), cookie[:40], 0)
            return _initiate(k, rng.randbytes(32), cookie)

        with sources(8, 40) as socks:
            flood(socks, node.address, (initiate(k) for k in range(n)))
            st, drops = settle(node, lambda st: st["cookie_invalid"] + st["truncated"], n)
        refused = proto.initiates_refused()
        handed = proto.secure_python() - before
        with a3m.Node("cookie-peer") as peer:
            pull = node.socket(a3m.PULL, "in")
            push = peer.socket(a3m.PUSH, "out")
            peer.associate("cookie-rx", node.address)
            push.link("cookie-rx/in")
            push.send(b"through", timeout=30)
            assert pull.recv(timeout=30) == b"through"
    assert st["cookie_invalid"] + st["truncated"] == refused == n - drops
    assert st["truncated"] > 0 and st["unauth_shed"] == 0
    assert handed == 0


def test_a_native_retry_s_token_proves_the_address_to_the_responder() -> None:
    """At a node whose budgets give every token-less HELLO a RETRY (``handshake_rate=1``),
    the first HELLO is the responder's (its jar makes its first secret then), the next one
    is answered natively (nothing handed to Python); sent again with that RETRY's token, the
    responder (Python) takes the token as proof of the address and answers with a WELCOME."""
    rng = Random(11)
    e = NodeKey.generate(rng.randbytes)
    with a3m.Node("retry-rx", handshake_rate=1.0) as node, sources(1, 70) as (s,):
        proto = node._driver.proto
        if not hasattr(proto, "secure_python"):
            pytest.skip("the Python engine runs (A3M_ENGINE=python)")
        s.settimeout(10)

        def answer(token: bytes, index: int = 7) -> bytes:
            _, msg1 = hs.hello(e, "retry-rx", index)
            head = p.HELLO_HDR.pack(p.VERSION, p.HELLO, len(token)) + token + msg1
            s.sendto(head + bytes(p.HELLO_SIZE - len(head)), node.address)
            try:
                while True:
                    d = s.recv(2048)
                    if d[1] in (p.RETRY, p.WELCOME):
                        return d
            except TimeoutError:
                pytest.fail("no answer")

        assert answer(b"", 6)[1] == p.RETRY
        before = proto.secure_python()
        retry = answer(b"")
        assert retry[1] == p.RETRY and retry[2:6] == hs.INDEX.pack(7)
        assert proto.secure_python() == before  # (answered natively)
        welcome = answer(retry[p.RETRY_HDR.size:])
        assert welcome[1] == p.WELCOME
        st = node.stats["exon"]
    assert st["retries_sent"] == 2 and st["hellos_answered"] == 1
    assert st["token_invalid"] == 0
