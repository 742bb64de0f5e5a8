"""CPU a secure node spends on each kind of datagram it refuses (us per datagram, by kind),
sans-I/O: ``ExonProtocol.receive_datagrams`` (the batch entry every runtime uses) plus taking
the output it causes (a RETRY, a WELCOME), without the socket's system calls. A real node adds
one ``recvfrom`` per datagram (and one ``sendto`` per answer) on top. ``--single`` feeds
``receive_datagram`` one at a time instead::

    .venv/bin/python bench/reject_cost.py [--count 20000] [--rate 20000] [--json out.json]

Each kind is fed as a flood of ``--rate`` datagrams a second on a virtual clock, after a
warm-up round that spends the budgets' bursts: the figures are what a lasting flood costs.

Kinds: random bytes (16-1400 B), an unknown type under the right version, sealed DATA with a
made-up session index, sealed DATA with a live index and a forged tag, INITIATE with a forged
cookie, WELCOME and RETRY for no handshake of ours, HELLOs from 254 addresses (beyond the
handshake rate: answered with a RETRY, or dropped once the RETRY budget is spent too), HELLOs
with a forged address token, and the legitimate case beside them (a sealed keepalive that opens).
"""

from __future__ import annotations

import argparse
import json
import struct
import time
from collections.abc import Callable
from random import Random

from a3m.exon import ExonConfig, ExonProtocol, MemoryClockStore
from a3m.exon.secure import packets as p
from a3m.testing.sim_keys import sim_entropy, sim_key

Datagram = tuple[bytes, tuple[str, int]]


def pair() -> tuple[ExonProtocol, ExonProtocol, float]:
    rng = Random(7)
    cfg = ExonConfig()
    a = ExonProtocol("a", cfg, Random(1), MemoryClockStore(1), key=sim_key("a"),
                     entropy=sim_entropy(rng))
    b = ExonProtocol("b", cfg, Random(2), MemoryClockStore(1), key=sim_key("b"),
                     entropy=sim_entropy(rng))
    addr = {"a": ("127.0.0.1", 1000), "b": ("127.0.0.1", 2000)}
    a.associate("b", addr["b"])
    b.associate("a", addr["a"])
    now = 0.0
    a.send("b", b"x" * 64, now)
    for _ in range(20):
        now += 0.001
        for src, dst in ((a, b), (b, a)):
            for data, _ in src.datagrams_to_send(now):
                dst.receive_datagram(data, addr[src.id], now)
        for n in (a, b):
            n.drain_events()
    assert a.secure is not None and a.secure.session_count() == 1
    return a, b, now


def sources(n: int) -> list[tuple[str, int]]:
    return [(f"127.0.0.{2 + i % 254}", 40000 + i % 1000) for i in range(n)]


def kinds(a: ExonProtocol, b: ExonProtocol, now: float, n: int
          ) -> dict[str, Callable[[], list[Datagram]]]:
    rng = Random(3)
    srcs = sources(n)
    rb = rng.randbytes
    sealed = p.SEALED_HDR
    live = next(iter(b.secure._by_index))  # type: ignore[union-attr]

    def data_opening() -> list[Datagram]:
        sealed_out: list[tuple[bytes, object]] = []
        for _ in range(n):  # keepalives: the session's open, without Exon's frames
            a.secure.seal("b", b"", ("127.0.0.1", 2000), now, sealed_out)  # type: ignore
        return [(d, ("127.0.0.1", 1000)) for d, _ in sealed_out]

    return {
        "random bytes": lambda: [(rb(rng.randint(16, 1400)), s) for s in srcs],
        "unknown type": lambda: [(bytes([p.VERSION, 0x0F]) + rb(60), s) for s in srcs],
        "sealed DATA, made-up index": lambda: [
            (sealed.pack(p.VERSION, p.DATA, rng.getrandbits(32), i) + rb(100), s)
            for i, s in enumerate(srcs)],
        "sealed DATA, live index, forged tag": lambda: [
            (sealed.pack(p.VERSION, p.DATA, live, 10**6 + i) + rb(100), s)
            for i, s in enumerate(srcs)],
        "INITIATE, forged cookie": lambda: [
            (p.INITIATE_HDR.pack(p.VERSION, p.INITIATE, rng.getrandbits(32)) + rb(32 + 72 + 85),
             s) for s in srcs],
        "WELCOME, no handshake": lambda: [
            (p.WELCOME_HDR.pack(p.VERSION, p.WELCOME, rng.getrandbits(32)) + rb(185), s)
            for s in srcs],
        "RETRY, no handshake": lambda: [
            (p.RETRY_HDR.pack(p.VERSION, p.RETRY, rng.getrandbits(32)) + rb(p.TOKEN_BYTES), s)
            for s in srcs],
        "HELLO, no token": lambda: [
            (_hello(b"", rb(36)), s) for s in srcs],
        "HELLO, forged token": lambda: [
            (_hello(struct.pack(">d", now) + rb(16), rb(36)), s) for s in srcs],
        "PLAIN (clear) datagram": lambda: [
            (bytes([p.VERSION, p.PLAIN, 1, 97, 1, 98]) + rb(60), s) for s in srcs],
        "legitimate sealed keepalive (opens)": data_opening,
    }


def _hello(token: bytes, e_index: bytes) -> bytes:
    head = p.HELLO_HDR.pack(p.VERSION, p.HELLO, len(token)) + token + e_index
    return head + bytes(p.HELLO_SIZE - len(head))


def measure(count: int, single: bool, rate: float) -> dict[str, dict[str, float]]:
    """Each kind as a flood of ``rate`` datagrams a second (virtual time): one warm-up
    round of ``count`` (the budgets' bursts spent), then ``count`` measured."""
    out: dict[str, dict[str, float]] = {}
    a, b, now = pair()
    step = 1.0 / rate
    for name, make in kinds(a, b, now, 2 * count).items():
        batch = make()
        warm, batch = batch[:count], batch[count:]
        now += 5.0  # every budget full again
        for d, s in warm:
            now += step
            b.receive_datagram(d, s, now)
        b.datagrams_to_send(now)
        before = b.stats.datagrams_out
        bytes_before = b.stats.bytes_out
        clock = [now + step * i for i in range(len(batch))]
        t0 = time.perf_counter()
        if single:
            feed = b.receive_datagram
            for i in range(0, len(batch), 64):
                for j in range(i, min(i + 64, len(batch))):
                    d, s = batch[j]
                    feed(d, s, clock[j])
                b.datagrams_to_send(clock[j])
        else:
            feed_many = b.receive_datagrams
            for i in range(0, len(batch), 64):
                feed_many(batch[i:i + 64], clock[i])
                b.datagrams_to_send(clock[i])
        dt = time.perf_counter() - t0
        now = clock[-1]
        b.drain_events()
        bytes_in = sum(len(d) for d, _ in batch)
        out[name] = {"us_per_datagram": round(dt / len(batch) * 1e6, 2),
                     "answers_per_datagram": round((b.stats.datagrams_out - before)
                                                   / len(batch), 4),
                     "bytes_back_per_byte": round((b.stats.bytes_out - bytes_before)
                                                  / bytes_in, 4)}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--count", type=int, default=20000)
    ap.add_argument("--rate", type=float, default=20000.0,
                    help="the flood's datagrams a second, in virtual time (default 20000)")
    ap.add_argument("--single", action="store_true", help="receive_datagram one at a time")
    ap.add_argument("--json", help="write the figures here too")
    args = ap.parse_args()
    res = measure(args.count, args.single, args.rate)
    width = max(map(len, res))
    for name, r in res.items():
        print(f"{name:<{width}}  {r['us_per_datagram']:7.2f} us  answers "
              f"{r['answers_per_datagram']:.3f}/datagram  bytes back "
              f"{r['bytes_back_per_byte']:.3f}/byte")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"count": args.count, "single": args.single, "rate": args.rate,
                       "kinds": res}, f, indent=2)


if __name__ == "__main__":
    main()
