"""CPU per message on the sans-I/O path of a PUSH/PULL pair, one side at a time (no sockets).

Two node hosts (Exon + core, as the simulator builds them) are joined in-process; the sender's
application sends a burst, its datagrams are handed over, the receiver's application takes
every message, its datagrams (ACKs, slots, credits) go back. Prints microseconds per message
spent on each side. ``--profile sender|receiver`` prints a cProfile of that side instead.

``--layers`` profiles both sides and splits each side's time by layer (the unprofiled
microseconds per message, shared out as the profile's own time is); ``--insecure`` runs the
opt-out (``secure=False``) to compare.

``--mtu M``: the path's MTU (Exon's ``max_datagram_size`` is M - 28, the IPv4 and UDP
headers); without it, 65028 (65000-byte datagrams, as toward a loopback peer). With 1500,
a 64 KiB message goes in ~47 fragments, one datagram each: per datagram is then the unit.

``--count``: the work of each side in units that do not move with the CPU's speed
(``bench/work_units.py``: Python calls, C calls, allocations, per layer), per message and per
data datagram (the sender's datagrams to the receiver), with the datagrams each way. Run it
on the compiled build and on the sources (``A3M_PURE_PYTHON=1``, where the calls between
a3m's own functions show).

Usage: python bench/core_path.py [--messages N] [--size B] [--pattern push/pull|pub/sub|pair/pair]
       [--profile sender|receiver] [--layers] [--insecure] [--mtu M] [--count]
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import sys
import time
from random import Random

from a3m.exon import ExonConfig
from a3m.testing.sim_node import NodeHost

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from work_units import WorkCounter  # noqa: E402

ADDR = {"tx": ("127.0.0.1", 1), "rx": ("127.0.0.1", 2)}
#: IPv4 and UDP headers: a datagram's payload on a path of MTU M is at most M - 28 bytes.
IP_UDP = 28


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


def build(capacity: int, pattern: str, secure: bool = True, mtu: int = 65000 + IP_UDP
          ) -> tuple[NodeHost, NodeHost, object, object]:
    rng = Random(1)
    cfg = ExonConfig(max_datagram_size=mtu - IP_UDP, secure=secure)
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
        profs: dict[str, cProfile.Profile] | None = None, mtu: int = 65000 + IP_UDP,
        work: dict[str, WorkCounter] | None = None) -> dict[str, float]:
    """Both sides' time per message, the loop's CPU time per message beside its wall time
    (both sides and the harness: on a shared machine the wall time also counts the time this
    process waited for a CPU), and the datagrams each way. ``work``: a WorkCounter per side
    (``tx``, ``rx``), running while that side runs."""
    tx, rx, push, pull = build(capacity, pattern, secure, mtu)
    now = 0.0
    cost = {"tx": 0.0, "rx": 0.0}
    sent_dgrams = {"tx": 0, "rx": 0}
    prof = cProfile.Profile() if profile else None

    def side(name: str, fn):  # type: ignore[no-untyped-def]
        w = work.get(name) if work is not None else None
        if w is not None:
            w.start()
            try:
                return fn()
            finally:
                w.stop()
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
        sent_dgrams[src.name] += len(dgrams)
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
    sent_dgrams = {"tx": 0, "rx": 0}
    for w in (work or {}).values():
        w.reset()  # (the link's set-up is not the stream's)
    payload = b"p" * size
    sent = got = 0
    wall0, cpu0 = time.perf_counter(), time.process_time()
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
    wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
    if prof is not None:
        pstats.Stats(prof).sort_stats("tottime").print_stats(25)
    return {"sender_us": cost["tx"] / messages * 1e6, "receiver_us": cost["rx"] / messages * 1e6,
            "loop_us": wall / messages * 1e6, "loop_cpu_us": cpu / messages * 1e6,
            "datagrams_per_message": sent_dgrams["tx"] / messages,
            "acks_per_message": sent_dgrams["rx"] / messages}


def count_work(messages: int, size: int, capacity: int, pattern: str, secure: bool,
               mtu: int) -> str:
    """``--count``: each side's units per message and per data datagram."""
    import a3m

    work = {"tx": WorkCounter(), "rx": WorkCounter()}
    r = run(messages, size, capacity, None, pattern, secure, mtu=mtu, work=work)
    per_dgram = r["datagrams_per_message"]
    out = [f"work per message ({'compiled' if a3m.COMPILED else 'Python sources'}, "
           f"{'secure' if secure else 'opt-out'}, {size} B, MTU {mtu}: "
           f"{per_dgram:.2f} data datagrams and {r['acks_per_message']:.3f} back per message)"]
    for name, label in (("tx", "sender"), ("rx", "receiver")):
        w = work[name]
        if w.by_function:
            out.append(w.top(messages, 40))
        out.append(w.table(messages, f"{label}, per message"))
        if per_dgram:
            out.append(w.table(round(messages * per_dgram), f"{label}, per data datagram"))
    return "\n".join(out)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--messages", type=int, default=200_000)
    p.add_argument("--size", type=int, default=64)
    p.add_argument("--capacity", type=int, default=4096)
    p.add_argument("--profile", choices=("sender", "receiver"))
    p.add_argument("--pattern", default="push/pull", choices=("push/pull", "pub/sub", "pair/pair"))
    p.add_argument("--layers", action="store_true", help="split each side's time by layer")
    p.add_argument("--insecure", action="store_true", help="the opt-out (secure=False)")
    p.add_argument("--mtu", type=int, default=65000 + IP_UDP,
                   help="path MTU: max_datagram_size is MTU - 28 (default: 65000-byte datagrams)")
    p.add_argument("--count", action="store_true",
                   help="Python calls, C calls and allocations per message and per datagram")
    a = p.parse_args()
    if a.count:
        print(count_work(a.messages, a.size, a.capacity, a.pattern, not a.insecure, a.mtu))
        return
    prof = {"sender": "tx", "receiver": "rx"}.get(a.profile or "")
    r = run(a.messages, a.size, a.capacity, prof, a.pattern, not a.insecure, mtu=a.mtu)
    dg = r["datagrams_per_message"]
    if dg:
        r["sender_us_per_datagram"] = r["sender_us"] / dg
        r["receiver_us_per_datagram"] = r["receiver_us"] / dg
    print({k: round(v, 3) for k, v in r.items()})
    if a.layers:
        profs = {"tx": cProfile.Profile(), "rx": cProfile.Profile()}
        run(a.messages, a.size, a.capacity, None, a.pattern, not a.insecure, profs, mtu=a.mtu)
        for name, us in (("tx", r["sender_us"]), ("rx", r["receiver_us"])):
            shares = by_layer(profs[name])
            print(("sender" if name == "tx" else "receiver") + f" {us:.2f} us/message: "
                  + ", ".join(f"{k} {us * v:.2f}" for k, v in shares.items() if v >= 0.005))


if __name__ == "__main__":
    main()
