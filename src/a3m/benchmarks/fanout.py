"""``a3m bench fanout``: one PUB to N SUB nodes, pyzmq beside it.

The other side of the fleet (:mod:`a3m.benchmarks.fanin`): one publisher sends the same
messages to many subscribers. The publisher runs in a process of its own (an ``a3m.Node``
with one PUB socket); the subscribers are ``a3m.aio`` nodes, ``per_process`` of them on one
event loop per process, each with its own UDP socket on 127.0.0.1 and one SUB socket that
links to the PUB and subscribes to everything. pyzmq runs the same phases in the same
invocation: one PUB socket bound over TCP, one SUB socket per subscriber (plain pyzmq, one
poller per process, the same layout), both high-water marks 0 (unbounded: nothing dropped for
want of room; what a SUB misses is counted all the same).

Phases, each bounded by ``timeout`` (a phase that times out reports what it saw, and the run
goes on: it never hangs):

1. **link**: every SUB links at once; ``link_s`` is the time from the start until the PUB
   holds an established link to every SUB and every SUB's ``wait_linked`` returned. pyzmq
   has a "slow joiner" (a SUB receives nothing published before its connection and
   subscription reached the PUB): its publisher sends probes until every SUB has received
   one, and ``link_s`` is the time until the last SUB's first probe.
2. **memory**: after a short settle, ``kib_per_sub`` is the publisher's resident memory over
   its memory before the first SUB, per SUB.
3. **fan-out**: the publisher sends ``messages`` numbered messages (each to every SUB);
   every SUB checks that each arrived exactly once and in order. ``deliveries_per_s`` is the
   deliveries (up to N x ``messages``) over the time from the first send to the last
   delivery; ``pub_cpu_us_per_delivery`` the publisher's CPU (every thread of its process)
   from its first send until every SUB has reported, per delivery.

Exactness: ``sent`` (messages the PUB sent), ``expected`` (``sent`` x subs), ``delivered``
(distinct messages delivered, over every SUB), ``missing`` (expected - delivered),
``duplicates`` (a message delivered again to the same SUB), ``out_of_order`` (delivered
after a later one), ``phantoms`` (never sent), ``unsent`` (the PUB's sends that timed out).

Each A3M row says which data plane ran (:func:`a3m.benchmarks.fanin.plane`, read in the
worker processes): ``path``, ``engine``, ``offload`` (the publisher's UDP socket's ``gso``
and ``gro``) and ``sub_path`` (the SUB processes'). ``paths`` (``--paths native,python``)
measures A3M on both data planes in one invocation (the system ``a3m-python`` starts its
processes with ``A3M_NATIVE=0``).
"""

from __future__ import annotations

import asyncio
import multiprocessing as mp
import os
import struct
import time
from typing import Any

from a3m.benchmarks.fanin import (
    _Child,
    _cpu_s,
    _more_files,
    _rss,
    a3m_systems,
    data_plane,
    one_path,
    plane,
    sweep_plot,
)
from a3m.benchmarks.procs import WorkerFailed, cpus_for
from a3m.benchmarks.registry import Progress, machine

#: SUB nodes (or pyzmq SUB sockets) per subscriber process.
PER_PROCESS = 250
#: Seconds between the link phase and the publisher's memory reading (last handshakes).
SETTLE_S = 0.5
#: Seconds a SUB process keeps reading after its SUBs have everything (a late duplicate).
LATE_S = 0.3
#: Fields plotted against the number of SUBs (and their axis labels).
FIGURES = (("link_s", "all linked after (s)"), ("deliveries_per_s", "deliveries/s"),
           ("kib_per_sub", "publisher KiB per SUB"),
           ("pub_cpu_us_per_delivery", "publisher CPU µs per delivery"),
           ("missing", "missing deliveries"))
#: The keys of a row that the top level and ``baselines`` / ``systems`` repeat.
KEYS = ("link_s", "deliveries_per_s", "kib_per_sub", "sent", "expected", "delivered",
        "missing", "duplicates", "out_of_order", "phantoms", "unsent", "pub_cpu_s",
        "pub_cpu_us_per_delivery", "exact", "error", "path", "engine", "offload", "sub_path")
#: Exon counters of the publisher reported after the fan-out.
PUB_COUNTERS = ("datagrams_out", "datagrams_in", "retransmits", "duplicates",
                "handshakes_accepted", "retries_sent")
_SEQ = struct.Struct(">I")
PROBE = 0xFFFFFFFF  # pyzmq's slow-joiner probe (never counted)


def payload(seq: int, size: int) -> bytes:
    """Message ``seq``: its number in 4 bytes, padded to ``size``."""
    return _SEQ.pack(seq) + b"x" * max(0, size - _SEQ.size)


class Tally:
    """What one SUB received: each message once, in order."""

    __slots__ = ("seen", "unique", "duplicates", "out_of_order", "phantoms", "probes",
                 "top", "first", "last")

    def __init__(self, messages: int) -> None:
        self.seen = bytearray(messages)
        self.unique = self.duplicates = self.out_of_order = self.phantoms = 0
        self.probes = 0
        self.top = -1  # the highest number delivered so far
        self.first = self.last = 0.0

    @property
    def complete(self) -> bool:
        return self.unique == len(self.seen)

    def take(self, payloads: list[bytes]) -> None:
        seen, m = self.seen, len(self.seen)
        fresh = self.unique
        for p in payloads:
            s = _SEQ.unpack_from(p)[0] if len(p) >= _SEQ.size else PROBE - 1
            if s == PROBE:
                self.probes += 1
            elif s >= m:
                self.phantoms += 1
            elif seen[s]:
                self.duplicates += 1
            else:
                seen[s] = 1
                self.unique += 1
                if s < self.top:  # after a later one
                    self.out_of_order += 1
                else:
                    self.top = s
        if self.unique > fresh:
            now = time.time()
            if not self.first:
                self.first = now
            self.last = now


def _summary(tallies: list[Tally]) -> dict[str, Any]:
    """A subscriber process's report: its SUBs' counts summed, first and last delivery."""
    firsts = [t.first for t in tallies if t.first]
    return {"delivered": sum(t.unique for t in tallies),
            "duplicates": sum(t.duplicates for t in tallies),
            "out_of_order": sum(t.out_of_order for t in tallies),
            "phantoms": sum(t.phantoms for t in tallies),
            "complete": sum(t.complete for t in tallies),
            "first": min(firsts) if firsts else None,
            "last": max((t.last for t in tallies), default=0.0) or None}


# ---------------------------------------------------------------------------- the publisher


def _publisher(system: str, conn: Any, subs: int, messages: int, size: int, timeout: float,
               cpus: set[int] | None) -> None:
    """The publisher's process: one PUB, driven through the phases by ``conn``."""
    if cpus:
        os.sched_setaffinity(0, cpus)
    _more_files(subs)
    try:
        if system.startswith("a3m"):
            _a3m_publisher(conn, subs, messages, size, timeout)
        else:
            _zmq_publisher(conn, subs, messages, size, timeout)
    except Exception as exc:  # reported, never a hang
        conn.send({"error": repr(exc)})
    conn.close()
    os._exit(0)  # no close of a thousand links: the run is measured


def _memory(conn: Any, rss0: int, subs: int) -> None:
    conn.recv()  # settle
    time.sleep(SETTLE_S)
    conn.send({"kib_per_sub": round((_rss() - rss0) / 1024 / subs, 2)})


def _a3m_publisher(conn: Any, subs: int, messages: int, size: int, timeout: float) -> None:
    import a3m

    node = a3m.Node("pub", key=os.urandom(32))
    pub = node.socket(a3m.PUB, "out")
    core, lock = pub._core, node._driver.lock
    rss0 = _rss()
    conn.send({"address": node.address, **plane(node)})
    go = conn.recv()["go"]
    linked_at = None
    n = 0
    while time.time() < go + timeout:
        with lock:
            n = len(core.established_links())
        if n >= subs:
            linked_at = time.time() - go
            break
        time.sleep(0.01)
    conn.recv()  # every SUB process reported
    conn.send({"pub_link_s": linked_at, "pub_links": n})
    _memory(conn, rss0, subs)
    conn.recv()  # send
    c0, t0 = _cpu_s(), time.time()
    deadline = time.monotonic() + timeout
    sent = 0
    try:
        for s in range(messages):
            pub.send(payload(s, size), timeout=max(0.01, deadline - time.monotonic()))
            sent += 1
    except a3m.Timeout:
        pass
    conn.send({"first_send": t0, "sent": sent, "send_s": time.time() - t0})
    conn.recv()  # every SUB process reported
    cpu = _cpu_s() - c0
    st = node.stats
    io = node._driver._io
    counters = io.counters() if hasattr(io, "counters") else None
    conn.send({"pub_cpu_s": cpu, "pub_stats": {**{k: st["exon"].get(k) for k in PUB_COUNTERS},
                                               "rx_drops": st["rx_drops"]},
               "io_counters": counters})


def _zmq_publisher(conn: Any, subs: int, messages: int, size: int, timeout: float) -> None:
    import zmq

    ctx = zmq.Context()
    pub = ctx.socket(zmq.PUB)
    pub.setsockopt(zmq.SNDHWM, 0)
    port = pub.bind_to_random_port("tcp://127.0.0.1")
    rss0 = _rss()
    conn.send({"address": ("127.0.0.1", port)})
    conn.recv()  # go
    probe = _SEQ.pack(PROBE)
    probes = 0
    while not conn.poll(0.01):  # until every SUB process saw a probe on each SUB
        pub.send(probe)
        probes += 1
    conn.recv()
    conn.send({"pub_link_s": None, "pub_links": None, "probes": probes})
    _memory(conn, rss0, subs)
    conn.recv()  # send
    c0, t0 = _cpu_s(), time.time()
    for s in range(messages):
        pub.send(payload(s, size))  # never blocks: no high-water mark
    conn.send({"first_send": t0, "sent": messages, "send_s": time.time() - t0})
    conn.recv()  # every SUB process reported
    conn.send({"pub_cpu_s": _cpu_s() - c0})
    conn.recv()  # the end: queued messages must not go before the SUBs have them
    pub.close(linger=0)
    ctx.term()


# ---------------------------------------------------------------------------- the subscribers


def _subscribers(system: str, conn: Any, first: int, count: int, address: tuple[str, int],
                 messages: int, timeout: float, cpus: set[int] | None) -> None:
    """A subscriber process: ``count`` SUBs numbered from ``first``."""
    if cpus:
        os.sched_setaffinity(0, cpus)
    _more_files(count)
    try:
        if system.startswith("a3m"):
            asyncio.run(_a3m_subscribers(conn, first, count, address, messages, timeout))
        else:
            _zmq_subscribers(conn, count, address, messages, timeout)
    except Exception as exc:
        conn.send({"error": repr(exc)})
    conn.close()
    os._exit(0)


async def _a3m_subscribers(conn: Any, first: int, count: int, address: tuple[str, int],
                           messages: int, timeout: float) -> None:
    import a3m
    import a3m.aio

    loop = asyncio.get_running_loop()
    subs = []
    for i in range(first, first + count):
        node = a3m.aio.Node(f"s{i}", bind=("127.0.0.1", 0), key=os.urandom(32))
        node.associate("pub", address)
        sub = node.socket(a3m.SUB, "in")
        sub.subscribe(b"")
        subs.append((node, sub))
    conn.send({"created": count, "path": plane(subs[0][0])["path"]})
    go = (await loop.run_in_executor(None, conn.recv))["go"]
    await asyncio.sleep(max(0.0, go - time.time()))
    last = 0.0

    async def link(sub: Any) -> bool:
        nonlocal last
        sub.link("pub/out")
        ok: bool = await sub.wait_linked(timeout=max(0.01, go + timeout - time.time()))
        if ok:
            last = max(last, time.time())
        return ok

    linked = await asyncio.gather(*(link(sub) for _, sub in subs))
    conn.send({"linked": sum(linked), "last_linked": last or None})
    await loop.run_in_executor(None, conn.recv)  # receive
    tallies = [Tally(messages) for _ in subs]
    deadline = time.monotonic() + timeout + 2.0  # (the PUB's own deadline comes first)

    async def receive(sub: Any, tally: Tally, until: float, all_of_it: bool) -> None:
        while not (all_of_it and tally.complete):
            left = until - time.monotonic()
            if left <= 0:
                return
            try:
                tally.take(await sub.recv_many(4096, timeout=left))
            except a3m.Timeout:
                return

    tasks = [asyncio.ensure_future(receive(sub, t, deadline, True))
             for (_, sub), t in zip(subs, tallies, strict=True)]
    conn.send({"ready": True})
    await asyncio.gather(*tasks)
    timed_out = not all(t.complete for t in tallies)
    late = time.monotonic() + LATE_S  # a duplicate would come now
    await asyncio.gather(*(receive(sub, t, late, False)
                           for (_, sub), t in zip(subs, tallies, strict=True)))
    conn.send({**_summary(tallies), "timed_out": timed_out})
    await loop.run_in_executor(None, conn.recv)  # the end (the nodes go with the process)


def _zmq_subscribers(conn: Any, count: int, address: tuple[str, int], messages: int,
                     timeout: float) -> None:
    import zmq

    ctx = zmq.Context()
    ctx.set(zmq.MAX_SOCKETS, max(1024, count + 64))
    socks = []
    poller = zmq.Poller()
    for _ in range(count):
        s = ctx.socket(zmq.SUB)
        s.setsockopt(zmq.RCVHWM, 0)
        s.setsockopt(zmq.SUBSCRIBE, b"")
        socks.append(s)
        poller.register(s, zmq.POLLIN)
    index = {s: k for k, s in enumerate(socks)}
    tallies = [Tally(messages) for _ in socks]
    conn.send({"created": count, "path": None})
    go = conn.recv()["go"]
    time.sleep(max(0.0, go - time.time()))
    for s in socks:
        s.connect(f"tcp://{address[0]}:{address[1]}")

    def drain(wait_ms: int) -> None:
        for s, _ in poller.poll(wait_ms):
            got = []
            try:
                for _ in range(4096):
                    got.append(s.recv(zmq.NOBLOCK))
            except zmq.Again:
                pass
            tallies[index[s]].take(got)

    probed = [0.0] * count
    while time.time() < go + timeout:
        drain(50)
        now = time.time()
        for k, t in enumerate(tallies):
            if t.probes and not probed[k]:
                probed[k] = now
        if all(probed):
            break
    linked = sum(1 for p in probed if p)
    conn.send({"linked": linked, "last_linked": max(probed) if linked == count else None})
    while not conn.poll(0.05):  # receive (the probes still coming are drained meanwhile)
        drain(0)
    conn.recv()
    deadline = time.monotonic() + timeout + 2.0
    conn.send({"ready": True})
    while not all(t.complete for t in tallies) and time.monotonic() < deadline:
        drain(100)
    timed_out = not all(t.complete for t in tallies)
    late = time.monotonic() + LATE_S
    while time.monotonic() < late:
        drain(50)
    conn.send({**_summary(tallies), "timed_out": timed_out})
    conn.recv()  # the end
    for s in socks:
        s.close(linger=0)
    ctx.term()


# ---------------------------------------------------------------------------- one run


def run_once(system: str, subs: int, messages: int = 1000, size: int = 64,
             timeout: float = 120.0, per_process: int = PER_PROCESS, placement: str = "spread",
             progress: Progress = lambda _: None) -> dict[str, Any]:
    """One fan-out of ``system`` (``a3m``, ``a3m-python`` or ``pyzmq``) to ``subs`` SUBs."""
    ctx = mp.get_context("spawn")
    sub_cpus, pub_cpus = cpus_for(placement)
    t_start = time.perf_counter()
    with data_plane(system):
        pub = _Child(ctx, _publisher, system, subs, messages, size, timeout, pub_cpus)
    children = [pub]
    out: dict[str, Any] = {"system": system, "subs": subs, "messages": messages,
                           "size": size, "per_process": per_process, "timeout_s": timeout}
    try:
        start = pub.get(60, "publisher start")
        address = tuple(start["address"])
        out.update(path=start.get("path"), engine=start.get("engine"),
                   offload=start.get("offload"))
        groups = []
        with data_plane(system):
            for first in range(0, subs, per_process):
                count = min(per_process, subs - first)
                groups.append(_Child(ctx, _subscribers, system, first, count, address,
                                     messages, timeout, sub_cpus))
        children += groups
        made = [g.get(max(120.0, timeout), "subscribers start") for g in groups]
        out["sub_path"] = one_path([m.get("path") for m in made])
        progress(f"fanout {system} {subs}: {len(groups)} subscriber process(es) ready, "
                 "linking")
        go = time.time() + 0.2
        for c in children:
            c.put({"go": go})
        reps = [g.get(timeout + 30, "subscribers link") for g in groups]
        pub.put("linked")
        prep = pub.get(timeout + 30, "publisher link")
        linked = sum(r["linked"] for r in reps)
        lasts = [r["last_linked"] for r in reps]
        link_s: float | None = None
        if linked == subs and None not in lasts:
            link_s = max(lasts) - go
            if prep["pub_link_s"] is not None:
                link_s = max(link_s, prep["pub_link_s"])
            elif system.startswith("a3m"):
                link_s = None  # the PUB did not see every link
        out.update(link_s=None if link_s is None else round(link_s, 3), linked=linked,
                   pub_links=prep["pub_links"], link_timed_out=link_s is None)
        if "probes" in prep:
            out["probes"] = prep["probes"]
        pub.put("settle")
        out["kib_per_sub"] = pub.get(SETTLE_S + 60, "publisher memory")["kib_per_sub"]
        progress(f"fanout {system} {subs}: linked {linked} in "
                 f"{out['link_s'] if link_s is not None else 'time-out'} s, "
                 f"{out['kib_per_sub']} KiB/SUB; sending {messages}")
        for g in groups:
            g.put("receive")
        for g in groups:
            g.get(60, "subscribers ready")
        pub.put("send")
        s = pub.get(timeout + 60, "publisher send")
        got = [g.get(timeout + 60, "subscribers receive") for g in groups]
        pub.put("done")
        cpu = pub.get(60, "publisher CPU")
        sent = s["sent"]
        expected = sent * subs
        delivered = sum(r["delivered"] for r in got)
        last = max((r["last"] for r in got if r["last"]), default=None)
        span = None if last is None else last - s["first_send"]
        out.update(sent=sent, unsent=messages - sent, expected=expected, delivered=delivered,
                   missing=expected - delivered,
                   duplicates=sum(r["duplicates"] for r in got),
                   out_of_order=sum(r["out_of_order"] for r in got),
                   phantoms=sum(r["phantoms"] for r in got),
                   complete_subs=sum(r["complete"] for r in got),
                   recv_timed_out=any(r["timed_out"] for r in got),
                   send_s=round(s["send_s"], 3),
                   deliveries_per_s=round(delivered / span) if span and span > 0 else None,
                   pub_cpu_s=round(cpu["pub_cpu_s"], 3),
                   pub_cpu_us_per_delivery=(round(cpu["pub_cpu_s"] / delivered * 1e6, 3)
                                            if delivered else None))
        for key in ("pub_stats", "io_counters"):
            if cpu.get(key) is not None:
                out[key] = cpu[key]
        out["exact"] = (out["missing"] == 0 and out["duplicates"] == 0
                        and out["out_of_order"] == 0 and out["phantoms"] == 0
                        and out["unsent"] == 0 and not out["link_timed_out"])
        progress(f"fanout {system} {subs}: {out['deliveries_per_s']} deliveries/s, "
                 f"{out['pub_cpu_us_per_delivery']} us publisher CPU per delivery, "
                 f"missing {out['missing']}, duplicates {out['duplicates']}, "
                 f"exact={out['exact']}" + (f", path {out['path']}" if out["path"] else ""))
    except WorkerFailed as exc:
        out["error"] = str(exc)
        out["exact"] = False
        progress(f"fanout {system} {subs}: {exc}")
    finally:
        for c in children:
            c.put("end")
        for c in children:
            c.end()
    out["elapsed_s"] = round(time.perf_counter() - t_start, 1)
    return out


def run_fanout(sub_counts: tuple[int, ...], messages: int = 1000, size: int = 64,
               timeout: float = 120.0, per_process: int = PER_PROCESS,
               placement: str = "spread", baselines: bool = True, paths: str = "native",
               progress: Progress = lambda _: None) -> dict[str, Any]:
    """A3M on each of ``paths``' data planes, and pyzmq in the same invocation, for each
    number of SUBs. The top level holds the figures of the last number given for the first
    A3M system, pyzmq's under ``baselines``, every system's under ``systems``; ``runs``
    holds every run."""
    systems = a3m_systems(paths)
    if baselines:
        try:
            import zmq  # noqa: F401

            systems.append("pyzmq")
        except ImportError:
            pass
    runs = [run_once(system, n, messages, size, timeout, per_process, placement, progress)
            for n in sub_counts for system in systems]
    last = sub_counts[-1]
    top = next(r for r in runs if r["system"] == systems[0] and r["subs"] == last)
    result: dict[str, Any] = {"workload": "fanout", "subs": last, "messages": messages,
                              "size": size, "per_process": per_process,
                              "placement": placement, "timeout_s": timeout, "paths": paths}
    result.update({k: top[k] for k in KEYS if k in top})
    result["baselines"] = {r["system"]: {k: r[k] for k in KEYS if k in r}
                           for r in runs if not r["system"].startswith("a3m")
                           and r["subs"] == last}
    result["systems"] = {r["system"]: {k: r[k] for k in KEYS if k in r}
                         for r in runs if r["subs"] == last}
    result["runs"] = runs
    result["all_exact"] = all(r.get("exact") for r in runs)
    result["machine"] = machine()
    return result


def plot(result: dict[str, Any], path: str) -> str:
    """Each figure against the number of SUBs, A3M beside pyzmq."""
    return sweep_plot(result, path, "subs", "SUBs", FIGURES,
                      f"fan-out of {result['messages']} messages of {result['size']} B\n"
                      f"{result['per_process']} SUBs per process, placement "
                      f"{result.get('placement')}\n{{machine}}", from_zero=True)
