"""``a3m bench groups``: a RADIO sending to a group of 1, 4 and 16 DISH members (ALL), beside a
PUB linked to as many SUBs, in the same run.

The receivers (one node per member, one DISH or SUB each) live in a process of their own; the
sender (RADIO, or PUB with every SUB linked by hand) runs in this one and sends ``messages``
payloads of ``size`` bytes with ``send_many``. Each member counts what it gets; messages per
second per member = ``messages`` / (first send to the last member's last message), and the
count must come out exact for every member (ALL is exactly once per member; PUB/SUB here is
too: A3M's PUB drops nothing).
"""

from __future__ import annotations

import multiprocessing as mp
import threading
import time
from collections.abc import Callable
from typing import Any

Progress = Callable[[str], None]


def _members(kind: str, k: int, messages: int, conn: Any) -> None:
    """Child: ``k`` nodes with a DISH (joined to "g") or a SUB each; reports per-member counts
    and the monotonic time (system-wide on Linux) of each member's last message."""
    import a3m

    nodes = [a3m.Node(f"member-{i}") for i in range(k)]
    socks = []
    for node in nodes:
        if kind == "DISH":
            s = node.socket(a3m.DISH, "in", capacity=4096)
            s.join("g")
        else:
            s = node.socket(a3m.SUB, "in", capacity=4096)
            s.subscribe(b"")
        socks.append(s)
    conn.send([(n.id, n.address) for n in nodes])
    counts = [0] * k
    ends = [0.0] * k
    disorder = [0] * k

    def drain(i: int) -> None:
        seen = 0
        while counts[i] < messages:
            try:
                got = socks[i].recv_many(4096, timeout=60)
            except a3m.Timeout:
                return
            for p in got:
                if int.from_bytes(p[:4], "big") != seen:
                    disorder[i] += 1
                seen += 1
            counts[i] += len(got)
        ends[i] = time.monotonic()

    threads = [threading.Thread(target=drain, args=(i,)) for i in range(k)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    conn.send({"counts": counts, "ends": ends, "out_of_order": disorder})
    conn.recv()
    for node in nodes:
        node.close(timeout=5)


def run_one(kind: str, k: int, messages: int, size: int) -> dict[str, Any]:
    import a3m

    ctx = mp.get_context("spawn")
    here, there = ctx.Pipe()
    proc = ctx.Process(target=_members, args=(kind, k, messages, there), daemon=True)
    proc.start()
    try:
        if not here.poll(60):
            raise RuntimeError("the members did not start")
        members = here.recv()
        with a3m.Node("sender") as node:
            for nid, addr in members:
                node.associate(nid, tuple(addr))
            if kind == "DISH":
                sock = node.socket(a3m.RADIO, "out")
                deadline = time.monotonic() + 30
                while len(sock.members("g", timeout=1)) < k:
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"{len(sock.members('g'))} of {k} members found")
                kw: dict[str, Any] = {"group": "g"}
            else:
                sock = node.socket(a3m.PUB, "out")
                for nid, _ in members:
                    sock.link((nid, "in"))
                for nid, _ in members:
                    if not sock.wait_linked((nid, "in"), timeout=30):
                        raise RuntimeError(f"PUB could not link to {nid}")
                kw = {"topic": b""}
            pad = b"x" * max(0, size - 4)
            batch = [i.to_bytes(4, "big") + pad for i in range(messages)]
            t0 = time.monotonic()
            for j in range(0, messages, 256):
                chunk = batch[j:j + 256]
                while chunk:
                    chunk = chunk[sock.send_many(chunk, timeout=120, **kw):]
            sent_s = time.monotonic() - t0
            if not here.poll(180):
                raise RuntimeError("the members did not report")
            rep = here.recv()
            here.send("done")
    finally:
        proc.join(30)
    elapsed = max(rep["ends"]) - t0
    exact = all(c == messages for c in rep["counts"]) and not any(rep["out_of_order"])
    return {"kind": "RADIO/DISH ALL" if kind == "DISH" else "PUB/SUB", "members": k,
            "messages": messages, "size": size, "exact": exact,
            "sender_s": round(sent_s, 3), "elapsed_s": round(elapsed, 3),
            "msgs_per_s_per_member": round(messages / elapsed),
            "deliveries_per_s": round(messages * k / elapsed)}


def run_groups(messages: int = 20_000, size: int = 64, members: tuple[int, ...] = (1, 4, 16),
               progress: Progress = lambda _: None) -> dict[str, Any]:
    from a3m.benchmarks.registry import machine

    rows = []
    for k in members:
        for kind in ("DISH", "SUB"):  # interleaved: drift hits both alike
            r = run_one(kind, k, messages, size)
            progress(f"{r['kind']}, {k} member(s): {r['msgs_per_s_per_member']:,} msg/s per "
                     f"member ({r['deliveries_per_s']:,} deliveries/s), exact={r['exact']}")
            rows.append(r)
    ratio = {}
    for k in members:
        radio = next(r for r in rows if r["members"] == k and r["kind"].startswith("RADIO"))
        pub = next(r for r in rows if r["members"] == k and r["kind"] == "PUB/SUB")
        ratio[str(k)] = round(radio["msgs_per_s_per_member"]
                              / max(1, pub["msgs_per_s_per_member"]), 2)
    return {"workload": "groups", "messages": messages, "size": size, "runs": rows,
            "radio_vs_pubsub": ratio, "exact": all(r["exact"] for r in rows),
            "machine": machine()}


def plot(result: dict[str, Any], path: str) -> str:
    """Messages/s per member against the group size, RADIO/DISH beside PUB/SUB."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    fig = Figure(figsize=(6.5, 3.8))
    ax = fig.add_subplot()
    for kind, style in (("RADIO/DISH ALL", "o-"), ("PUB/SUB", "s--")):
        rows = [r for r in result["runs"] if r["kind"] == kind]
        ax.plot([r["members"] for r in rows], [r["msgs_per_s_per_member"] for r in rows],
                style, label=kind)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("members")
    ax.set_ylabel("messages/s per member")
    ax.set_title(f"Fan-out of {result['size']} B messages, {result['messages']:,} each",
                 fontsize="medium")
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    return path
