"""CPU per message on the sans-I/O path of a PUSH/PULL pair, one side at a time (no sockets).

Two node hosts (Exon + core, as the simulator builds them) are joined in-process; the sender's
application sends a burst, its datagrams are handed over, the receiver's application takes
every message, its datagrams (ACKs, slots, credits) go back. Prints microseconds per message
spent on each side. ``--profile sender|receiver`` prints a cProfile of that side instead.

``--layers`` profiles both sides and splits each side's time by layer (the unprofiled
microseconds per message, shared out as the profile's own time is); ``--insecure`` runs the
opt-out (``secure=False``) to compare.

Usage: python bench/core_path.py [--messages N] [--size B] [--pattern push/pull|pub/sub|pair/pair]
       [--profile sender|receiver] [--layers] [--insecure]
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import time
from random import Random

from a3m.exon import ExonConfig
from a3m.testing.sim_node import NodeHost

ADDR = {"tx": ("127.0.0.1", 1), "rx": ("127.0.0.1", 2)}


LAYERS = (("/a3m/exon/secure/", "exon.secure"), ("/a3m/exon/", "exon"), ("/a3m/core/", "core"),
          ("/a3m/patterns/", "patterns"), ("/a3m/testing/", "host glue"))


def layer_of(filename: str, func: str) -> str:
    for part, name in LAYERS:
        if part in filename:
            return name
    if "ChaCha20Poly1305" in func or "AESGCM" in func:
        return "AEAD (C)"
    return "other (builtins, stdlib)" if filename == "~" or "/lib/python" in filename else "bench"


def by_layer(prof: cProfile.Profile) -> dict[str, float]:
    """Shares of the profile's own time per layer."""
    out: dict[str, float] = {}
    stats = pstats.Stats(prof).stats  # type: ignore[attr-defined]
    for (filename, _, func), (_, _, tt, _, _) in stats.items():
        k = layer_of(filename, func)
        out[k] = out.get(k, 0.0) + tt
    total = sum(out.values()) or 1.0
    return {k: v / total for k, v in sorted(out.items(), key=lambda kv: -kv[1])}


def build(capacity: int, pattern: str, secure: bool = True
          ) -> tuple[NodeHost, NodeHost, object, object]:
    rng = Random(1)
    cfg = ExonConfig(max_datagram_size=65000, secure=secure)
    tx, rx = NodeHost("tx", rng, cfg), NodeHost("rx", rng, cfg)
    tx.proto.associate("rx", ADDR["rx"])
    rx.proto.associate("tx", ADDR["tx"])
    tx_kind, rx_kind = pattern.upper().split("/")
    pull = rx.core.create(rx_kind, "sink", capacity=capacity)
    if rx_kind == "SUB":
        pull.subscribe(b"")  # type: ignore[attr-defined]
    push = tx.core.create(tx_kind, "source")
    push.link(("rx", "sink"), 0.0)
    return tx, rx, push, pull


def run(messages: int, size: int, capacity: int, profile: str | None,
        pattern: str = "push/pull", secure: bool = True,
        profs: dict[str, cProfile.Profile] | None = None) -> dict[str, float]:
    tx, rx, push, pull = build(capacity, pattern, secure)
    now = 0.0
    cost = {"tx": 0.0, "rx": 0.0}
    prof = cProfile.Profile() if profile else None

    def side(name: str, fn):  # type: ignore[no-untyped-def]
        t0 = time.perf_counter()
        p = profs.get(name) if profs is not None else (prof if name == profile else None)
        if p is not None:
            p.enable()
            out = fn()
            p.disable()
        else:
            out = fn()
        cost[name] += time.perf_counter() - t0
        return out

    def exchange(src: NodeHost, dst: NodeHost) -> int:
        dgrams = side(src.name, lambda: src.datagrams_to_send(now))
        for data, _ in dgrams:
            side(dst.name, lambda d=data: dst.receive_datagram(d, ADDR[src.name], now))
        return len(dgrams)

    for _ in range(50):  # link up
        now += 0.001
        exchange(tx, rx)
        exchange(rx, tx)
        if push.is_linked():
            break
    cost = {"tx": 0.0, "rx": 0.0}
    payload = b"p" * size
    sent = got = 0
    while got < messages:
        now += 0.0001

        def app_send(now: float = now) -> None:
            nonlocal sent
            tx.core.now = now
            while sent < messages and push.try_send(payload):
                sent += 1
                tx.pump(now)  # as Node._after_call does per send
        side("tx", app_send)
        exchange(tx, rx)

        def app_recv() -> None:
            nonlocal got
            while pull.try_recv() is not None:
                got += 1
        exchange(rx, tx)  # the receiver's events reach its core in datagrams_to_send
        side("rx", app_recv)
        exchange(rx, tx)
        for h in (tx, rx):
            t = h.next_timer()
            if t is not None and t <= now:
                side(h.name, lambda h=h, now=now: h.handle_timer(now))
    if prof is not None:
        pstats.Stats(prof).sort_stats("tottime").print_stats(25)
    return {"sender_us": cost["tx"] / messages * 1e6, "receiver_us": cost["rx"] / messages * 1e6}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--messages", type=int, default=200_000)
    p.add_argument("--size", type=int, default=64)
    p.add_argument("--capacity", type=int, default=4096)
    p.add_argument("--profile", choices=("sender", "receiver"))
    p.add_argument("--pattern", default="push/pull", choices=("push/pull", "pub/sub", "pair/pair"))
    p.add_argument("--layers", action="store_true", help="split each side's time by layer")
    p.add_argument("--insecure", action="store_true", help="the opt-out (secure=False)")
    a = p.parse_args()
    prof = {"sender": "tx", "receiver": "rx"}.get(a.profile or "")
    r = run(a.messages, a.size, a.capacity, prof, a.pattern, not a.insecure)
    print({k: round(v, 3) for k, v in r.items()})
    if a.layers:
        profs = {"tx": cProfile.Profile(), "rx": cProfile.Profile()}
        run(a.messages, a.size, a.capacity, None, a.pattern, not a.insecure, profs)
        for name, us in (("tx", r["sender_us"]), ("rx", r["receiver_us"])):
            shares = by_layer(profs[name])
            print(("sender" if name == "tx" else "receiver") + f" {us:.2f} us/message: "
                  + ", ".join(f"{k} {us * v:.2f}" for k, v in shares.items() if v >= 0.005))


if __name__ == "__main__":
    main()
