"""``a3m bench fanin``: N producer nodes into one collector's PULL, pyzmq beside it.

The fleet's shape (issue 32): many light producers link a PUSH socket each to one collector's
PULL socket and send a few messages each. The collector runs in a process of its own (an
``a3m.Node``, as the Spark source's collector is); the producers are ``a3m.aio`` nodes, up to
``per_process`` of them on one event loop per process, every node with its own UDP socket,
all bound to 127.0.0.1 (or spread over ``sources`` loopback addresses). pyzmq runs the same
phases in the same invocation: one PUSH socket per producer, connected over TCP to one PULL.

Phases, each bounded by ``timeout`` (a phase that times out reports what it saw and the run
goes on, so a run never hangs):

1. **link**: every producer links at once; ``link_s`` is the time from the start until the
   collector holds a link from every producer and every producer's ``wait_linked`` returned
   (pyzmq: until the collector saw every ZMTP handshake succeed, by its socket monitor).
2. **quiet**: after a settling second, the collector's CPU over ``quiet_s`` seconds with every
   link quiet (``idle_cpu_pct``, percent of one core: keepalives, timers, whatever costs with
   the number of peers), and the datagrams its kernel socket dropped meanwhile.
3. **fan-in**: every producer sends ``messages`` numbered messages at once; the collector
   audits every one (``sent``, ``received``, ``lost``, ``duplicates``, ``phantoms``) and
   reports ``msgs_per_s`` (first to last message received) and its CPU per message.

``kib_per_peer`` is the collector's resident memory after the quiet phase over its memory
before the first link, per peer. ``rx_drops`` counts what the collector's kernel socket
dropped over the whole run (pyzmq: TCP drops nothing, None).

Each A3M row says which data plane ran (:func:`plane`, read in the worker processes):
``path`` (``native``: ``a3m._native``; ``python``: its Python twins), ``engine`` (the Exon
engine's) and ``offload`` (``gso``, ``gro`` of the collector's UDP socket). ``paths``
(``--paths native,python``) runs A3M on both data planes in one invocation: the system
``a3m-python`` starts its processes with ``A3M_NATIVE=0`` (:func:`data_plane`).
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing as mp
import os
import resource
import struct
import time
from collections.abc import Iterator
from typing import Any

from a3m._dataplane import NATIVE_ENV
from a3m.benchmarks.procs import WorkerFailed, cpus_for
from a3m.benchmarks.registry import Progress, machine

#: Producer nodes (or pyzmq sockets) per producer process.
PER_PROCESS = 500
#: Fields plotted against the number of peers (and their axis labels).
FIGURES = (("link_s", "all linked after (s)"), ("idle_cpu_pct", "collector CPU, quiet (%)"),
           ("kib_per_peer", "collector KiB per peer"), ("msgs_per_s", "fan-in msg/s"),
           ("rx_drops", "collector kernel drops"))
SYSTEMS = ("a3m", "pyzmq")
#: Exon counters reported by phase, the collector's and the producers' (summed): counts do
#: not move with the machine's load as times do.
COUNTERS = ("datagrams_in", "datagrams_out", "retransmits", "probe_timeouts", "probe_copies",
            "reqslots_retransmits", "duplicates", "hello_resends", "initiate_resends",
            "handshakes_started", "handshakes_accepted", "hellos_answered", "retries_sent",
            "unauth_shed", "handshake_repeats", "probes_deferred")
_ID = struct.Struct(">II")  # producer index, sequence number


#: A3M's data planes (``--paths``): ``native`` runs as installed (``a3m.NATIVE``), ``python``
#: with ``A3M_NATIVE=0`` (the system ``a3m-python``).
PATHS = ("native", "python")


def a3m_systems(paths: str = "native") -> list[str]:
    """The A3M systems for ``--paths`` (``native``, ``python`` or both, separated by
    commas): ``a3m`` and ``a3m-python``; ValueError for anything else. Where the native data
    plane does not run here, ``a3m`` would run the Python one again beside ``a3m-python``:
    it is left out then (a lone ``a3m`` stays, and its rows say ``path: python``)."""
    import a3m

    want = list(dict.fromkeys(p.strip() for p in paths.split(",") if p.strip()))
    if not want or set(want) - set(PATHS):
        raise ValueError(f"paths are some of {','.join(PATHS)}, not {paths!r}")
    names = ["a3m" if p == "native" else "a3m-python" for p in want]
    if not a3m.NATIVE and len(names) > 1:
        names.remove("a3m")
    return names


@contextlib.contextmanager
def data_plane(system: str) -> Iterator[None]:
    """Processes started within run ``system``'s data plane: ``A3M_NATIVE=0`` in their
    environment for an ``...-python`` system (read as ``a3m`` is imported, there), the
    environment as it is otherwise."""
    if not system.endswith("-python"):
        yield
        return
    old = os.environ.get(NATIVE_ENV)
    os.environ[NATIVE_ENV] = "0"
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(NATIVE_ENV, None)
        else:
            os.environ[NATIVE_ENV] = old


def plane(node: Any) -> dict[str, Any]:
    """Which data plane an A3M node (``a3m.Node`` or ``a3m.aio.Node``) runs, in its process:
    ``path`` (``native`` when ``a3m.NATIVE``, else ``python``), ``engine`` (its Exon
    engine's: ``native`` or ``python``, ``A3M_ENGINE``) and ``offload`` (its UDP socket's
    ``gso`` sends and ``gro`` reads)."""
    import a3m

    sync = getattr(node, "sync", node)
    io = sync._driver._io
    native_engine = type(sync._proto).__module__ == "a3m._native"
    return {"path": "native" if a3m.NATIVE else "python",
            "engine": "native" if native_engine else "python",
            "offload": {"gso": bool(getattr(io, "gso", False)),
                        "gro": bool(getattr(io, "gro", False))}}


def one_path(paths: list[str | None]) -> str | None:
    """The path several processes reported: the one they share, ``mixed``, or None."""
    got = {p for p in paths if p is not None}
    return None if not got else got.pop() if len(got) == 1 else "mixed"


def planes_text(runs: list[dict[str, Any]]) -> str:
    """One line per A3M system of ``runs``: the data plane and offload it ran with (for the
    plots)."""
    lines = []
    for system in dict.fromkeys(r["system"] for r in runs if r["system"].startswith("a3m")):
        r = next(r for r in runs if r["system"] == system)
        off = r.get("offload") or {}
        lines.append(f"{system}: {r.get('path')} data plane, {r.get('engine')} engine, "
                     f"GSO {'on' if off.get('gso') else 'off'}, "
                     f"GRO {'on' if off.get('gro') else 'off'}")
    return "\n".join(lines)


def _node_options() -> dict[str, Any]:
    """Exon options for every A3M node of the run (``--node-option``, passed down in
    ``A3M_FANIN_NODE_OPTIONS`` as JSON): to try a setting at fleet scale."""
    import json

    return dict(json.loads(os.environ.get("A3M_FANIN_NODE_OPTIONS", "{}")))


def _socket_options() -> dict[str, Any]:
    """Socket options for every A3M PUSH and PULL of the run (``--socket-option``, passed
    down in ``A3M_FANIN_SOCKET_OPTIONS`` as JSON)."""
    import json

    return dict(json.loads(os.environ.get("A3M_FANIN_SOCKET_OPTIONS", "{}")))


def _counts(stats: list[dict[str, Any]]) -> dict[str, int]:
    """COUNTERS summed over the Exon stats of some nodes."""
    return {k: sum(int(st.get(k, 0)) for st in stats) for k in COUNTERS}


def _minus(a: dict[str, int], b: dict[str, int]) -> dict[str, int]:
    return {k: a[k] - b.get(k, 0) for k in a}


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _cpu_s() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def _more_files(n: int) -> None:
    """Raise the open-file limit towards what ``n`` sockets need (as far as allowed)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = n * 2 + 256
    if soft != resource.RLIM_INFINITY and soft < want:
        new = want if hard == resource.RLIM_INFINITY else min(want, hard)
        resource.setrlimit(resource.RLIMIT_NOFILE, (new, hard))


def default_messages(peers: int) -> int:
    """Messages per producer when not given: about 200 000 in all, at least 20 each."""
    return max(20, 200_000 // peers)


def source_address(i: int, sources: int) -> str:
    """The loopback address producer ``i`` binds to when spread over ``sources`` addresses."""
    if sources <= 1:
        return "127.0.0.1"
    j = i % sources
    return f"127.0.{1 + j // 250}.{1 + j % 250}"


# ---------------------------------------------------------------------------- the collector


class _Audit:
    """Every (producer, sequence) the collector received, once or more."""

    def __init__(self, peers: int, messages: int) -> None:
        self.messages = messages
        self.limit = peers * messages
        self.seen = bytearray(self.limit)
        self.received = self.unique = self.duplicates = self.phantoms = 0
        self.first = self.last = 0.0

    def take(self, payloads: list[bytes]) -> None:
        now = time.perf_counter()
        if not self.first:
            self.first = now
        self.last = now
        seen, m, limit = self.seen, self.messages, self.limit
        for p in payloads:
            i, s = _ID.unpack_from(p)
            k = i * m + s
            if s < m and k < limit:
                if seen[k]:
                    self.duplicates += 1
                else:
                    seen[k] = 1
                    self.unique += 1
            else:
                self.phantoms += 1
        self.received += len(payloads)

    def report(self) -> dict[str, Any]:
        span = self.last - self.first
        return {"received": self.received, "unique": self.unique,
                "duplicates": self.duplicates, "phantoms": self.phantoms,
                "msgs_per_s": round((self.unique - 1) / span) if span > 0 else None}


def _collector(system: str, conn: Any, peers: int, messages: int, quiet_s: float,
               timeout: float, cpus: set[int] | None) -> None:
    """The collector's process: one PULL, driven through the phases by ``conn``."""
    if cpus:
        os.sched_setaffinity(0, cpus)
    _more_files(peers)
    prefix = os.environ.get("A3M_FANIN_PROFILE")
    if prefix:
        _sample_stacks(f"{prefix}-{system}-{peers}.txt")
    try:
        if system.startswith("a3m"):
            _a3m_collector(conn, peers, messages, quiet_s, timeout)
        else:
            _zmq_collector(conn, peers, messages, quiet_s, timeout)
    except Exception as exc:  # reported, never a hang
        conn.send({"error": repr(exc)})
    conn.close()
    os._exit(0)  # no close of thousands of links: the run is measured


_PHASE = ["start"]  # the collector's phase, the root of each sampled stack


def _sample_stacks(path: str, interval: float = 0.004) -> None:
    """With ``A3M_FANIN_PROFILE=PREFIX`` in the environment, the collector samples the stacks
    of its other threads every ``interval`` seconds into ``PREFIX-<system>-<peers>.txt``
    (collapsed stacks with counts, written every few seconds: for finding what grows with
    the peers, not for figures; run with ``A3M_PURE_PYTHON=1`` to see inside the cores)."""
    import collections
    import sys
    import threading

    counts: collections.Counter[str] = collections.Counter()

    def sample() -> None:
        last = time.monotonic()
        while True:
            time.sleep(interval)
            native = {t.ident: t.native_id for t in threading.enumerate()}
            for tid, frame in sys._current_frames().items():
                if tid == threading.get_ident():
                    continue
                try:  # only threads on a CPU (state R): a CPU profile, not a wall-clock one
                    with open(f"/proc/self/task/{native.get(tid)}/stat") as st:
                        if st.read().rpartition(")")[2].split()[0] != "R":
                            continue
                except OSError:
                    continue
                names = []
                f: Any = frame
                while f is not None:
                    co = f.f_code
                    names.append(f"{co.co_name} ({os.path.basename(co.co_filename)}:"
                                 f"{co.co_firstlineno})")
                    f = f.f_back
                counts[_PHASE[0] + ";" + ";".join(reversed(names))] += 1
            if time.monotonic() - last > 2.0:
                last = time.monotonic()
                with open(path, "w") as out:
                    for stack, n in counts.items():
                        out.write(f"{stack} {n}\n")

    threading.Thread(target=sample, daemon=True).start()


def _quiet(conn: Any, quiet_s: float, drops: Any, counts: Any = None) -> dict[str, Any]:
    time.sleep(1.0)  # the last link's handshakes settle
    before = counts() if counts is not None else None
    d0 = drops()
    c0, t0 = _cpu_s(), time.perf_counter()
    time.sleep(quiet_s)
    c1, t1 = _cpu_s(), time.perf_counter()
    d1 = drops()
    return {"idle_cpu_pct": round(100 * (c1 - c0) / (t1 - t0), 2),
            "rx_drops_quiet": None if d0 is None or d1 is None else d1 - d0,
            "rss": _rss(), "counts_before": before}


def _fan_in(conn: Any, audit: _Audit, recv: Any, timeout: float) -> dict[str, Any]:
    """Receive until every message the producers sent arrived (the parent tells how many
    once they all reported), or nothing came for ``timeout``."""
    c0 = _cpu_s()
    total: int | None = None
    quiet_since = time.monotonic()
    timed_out = False
    while total is None or audit.unique < total:
        got = recv()
        now = time.monotonic()
        if got:
            audit.take(got)
            quiet_since = now
        elif now - quiet_since > timeout:
            timed_out = True
            break
        if conn.poll():
            total = conn.recv()["sent"]
    if total is not None:  # a late duplicate would come now
        end = time.monotonic() + 0.3
        while time.monotonic() < end:
            got = recv()
            if got:
                audit.take(got)
    cpu = _cpu_s() - c0
    out = audit.report()
    out["recv_timed_out"] = timed_out
    out["busy_cpu_us_per_msg"] = round(cpu / max(1, audit.unique) * 1e6, 2)
    return out


def _a3m_collector(conn: Any, peers: int, messages: int, quiet_s: float,
                   timeout: float) -> None:
    import a3m

    node = a3m.Node("collector", key=os.urandom(32), **_node_options())
    pull = node.socket(a3m.PULL, "in", **_socket_options())
    links = pull._core.links
    rss0 = _rss()
    conn.send({"address": node.address, **plane(node)})

    def drops() -> int | None:
        return node.stats["rx_drops"]

    drops0 = drops()
    t0 = conn.recv()["go"]
    _PHASE[0] = "link"
    linked_at = None
    while time.time() - t0 < timeout:
        if len(links) >= peers:
            linked_at = time.time() - t0
            break
        time.sleep(0.005)
    def counts() -> dict[str, int]:
        return _counts([node.stats["exon"]])

    at_link = counts()
    conn.send({"collector_link_s": linked_at, "collector_links": len(links)})
    conn.recv()  # quiet
    _PHASE[0] = "quiet"
    q = _quiet(conn, quiet_s, drops, counts)
    before_quiet = q["counts_before"]
    at_quiet = counts()
    conn.send({"idle_cpu_pct": q["idle_cpu_pct"], "rx_drops_quiet": q["rx_drops_quiet"],
               "kib_per_peer": round((q["rss"] - rss0) / 1024 / peers, 2),
               "links": len(links)})
    conn.recv()  # fan-in
    _PHASE[0] = "fan-in"
    drops_fan_in = drops()
    conn.send({"ready": True})

    def recv() -> list[bytes]:
        try:
            return pull.recv_many(4096, timeout=0.1)
        except a3m.Timeout:
            return []

    out = _fan_in(conn, _Audit(peers, messages), recv, timeout)
    d1 = drops()
    out["rx_drops"] = None if drops0 is None or d1 is None else d1 - drops0
    out["rx_drops_fan_in"] = (None if drops_fan_in is None or d1 is None
                              else d1 - drops_fan_in)
    st = node.stats["exon"]
    out["collector_stats"] = {k: st.get(k) for k in (
        "datagrams_in", "datagrams_out", "handshakes_accepted", "hellos_answered",
        "retries_sent", "unauth_shed", "cookie_invalid", "token_invalid",
        "handshake_repeats", "duplicates", "retransmits")}
    # By phase: linking (to the collector's last link), settling (until the quiet phase's
    # measure starts: the producers' reports and a second), quiet (the quiet_s measured),
    # fan-in (the rest).
    end = counts()
    out["collector_counts"] = {"link": at_link, "settle": _minus(before_quiet, at_link),
                               "quiet": _minus(at_quiet, before_quiet),
                               "fan_in": _minus(end, at_quiet)}
    conn.send(out)


def _zmq_collector(conn: Any, peers: int, messages: int, quiet_s: float,
                   timeout: float) -> None:
    import zmq

    ctx = zmq.Context()
    ctx.set(zmq.MAX_SOCKETS, max(1024, peers + 64))
    pull = ctx.socket(zmq.PULL)
    pull.set_hwm(0)
    port = pull.bind_to_random_port("tcp://127.0.0.1")
    mon = pull.get_monitor_socket(zmq.EVENT_HANDSHAKE_SUCCEEDED)
    rss0 = _rss()
    conn.send({"address": ("127.0.0.1", port)})
    t0 = conn.recv()["go"]
    done = 0
    linked_at = None
    while time.time() - t0 < timeout:
        if mon.poll(50):
            while True:
                try:
                    mon.recv_multipart(zmq.NOBLOCK)
                except zmq.Again:
                    break
                done += 1
        if done >= peers:
            linked_at = time.time() - t0
            break
    conn.send({"collector_link_s": linked_at, "collector_links": done})
    conn.recv()  # quiet
    q = _quiet(conn, quiet_s, lambda: None)
    conn.send({"idle_cpu_pct": q["idle_cpu_pct"], "rx_drops_quiet": None,
               "kib_per_peer": round((q["rss"] - rss0) / 1024 / peers, 2), "links": done})
    conn.recv()  # fan-in
    conn.send({"ready": True})

    def recv() -> list[bytes]:
        if not pull.poll(100):
            return []
        out = []
        try:
            for _ in range(4096):
                out.append(pull.recv(zmq.NOBLOCK))
        except zmq.Again:
            pass
        return out

    out = _fan_in(conn, _Audit(peers, messages), recv, timeout)
    out["rx_drops"] = None
    conn.send(out)


# ---------------------------------------------------------------------------- the producers


def _producers(system: str, conn: Any, first: int, count: int, address: tuple[str, int],
               messages: int, size: int, sources: int, timeout: float,
               cpus: set[int] | None) -> None:
    """A producer process: ``count`` producers numbered from ``first``."""
    if cpus:
        os.sched_setaffinity(0, cpus)
    _more_files(count)
    try:
        if system.startswith("a3m"):
            asyncio.run(_a3m_producers(conn, first, count, address, messages, size, sources,
                                       timeout))
        else:
            _zmq_producers(conn, first, count, address, messages, size, timeout)
    except Exception as exc:
        conn.send({"error": repr(exc)})
    conn.close()
    os._exit(0)


def _payloads(i: int, messages: int, size: int) -> list[bytes]:
    pad = b"x" * max(0, size - _ID.size)
    return [_ID.pack(i, s) + pad for s in range(messages)]


async def _a3m_producers(conn: Any, first: int, count: int, address: tuple[str, int],
                         messages: int, size: int, sources: int, timeout: float) -> None:
    import a3m
    import a3m.aio

    loop = asyncio.get_running_loop()
    nodes = []
    for i in range(first, first + count):
        node = a3m.aio.Node(f"p{i}", bind=(source_address(i, sources), 0),
                            key=os.urandom(32), **_node_options())
        node.associate("collector", address)
        nodes.append((i, node, node.socket(a3m.PUSH, "out", **_socket_options())))
    conn.send({"created": count, "path": plane(nodes[0][1])["path"] if nodes else None})
    go = (await loop.run_in_executor(None, conn.recv))["go"]
    await asyncio.sleep(max(0.0, go - time.time()))
    last = 0.0

    async def link(push: Any) -> bool:
        nonlocal last
        push.link("collector/in")
        ok: bool = await push.wait_linked(timeout=timeout)
        if ok:
            last = max(last, time.time())
        return ok

    linked = await asyncio.gather(*(link(push) for _, _, push in nodes))

    def counts() -> dict[str, int]:
        # (the Exon counters themselves: node.stats also reads /proc/net/udp for the kernel's
        # drops, a look at every socket of the host, per node)
        got = _counts([node.sync._proto.stats.as_dict() for _, node, _ in nodes])
        got["turns"] = sum(node._driver.turns for _, node, _ in nodes)  # the loop's wake-ups
        return got

    at_link = counts()
    conn.send({"linked": sum(linked), "last_linked": last or None, "counts": at_link})
    await loop.run_in_executor(None, conn.recv)  # send

    async def send(i: int, push: Any) -> tuple[int, int]:
        sent = 0
        try:
            for p in _payloads(i, messages, size):
                await push.send(p, timeout=timeout)
                sent += 1
        except a3m.Timeout:
            pass
        return sent, messages - sent

    t0 = time.perf_counter()
    done = await asyncio.gather(*(send(i, push) for i, _, push in nodes))
    conn.send({"sent": sum(s for s, _ in done), "unsent": sum(u for _, u in done),
               "send_s": time.perf_counter() - t0})
    await loop.run_in_executor(None, conn.recv)  # the fan-in is over
    conn.send({"counts": _minus(counts(), at_link)})
    await loop.run_in_executor(None, conn.recv)  # the end (the nodes go with the process)


def _zmq_producers(conn: Any, first: int, count: int, address: tuple[str, int],
                   messages: int, size: int, timeout: float) -> None:
    import zmq

    ctx = zmq.Context()
    ctx.set(zmq.MAX_SOCKETS, max(1024, count + 64))
    socks = []
    for _ in range(count):
        s = ctx.socket(zmq.PUSH)
        s.set_hwm(0)
        s.setsockopt(zmq.SNDTIMEO, int(timeout * 1000))
        socks.append(s)
    conn.send({"created": count})
    time.sleep(max(0.0, conn.recv()["go"] - time.time()))
    for s in socks:
        s.connect(f"tcp://{address[0]}:{address[1]}")
    conn.send({"linked": count, "last_linked": None})  # the collector's monitor counts
    conn.recv()  # send
    t0 = time.perf_counter()
    sent = unsent = 0
    for k, s in enumerate(socks):
        for p in _payloads(first + k, messages, size):
            try:
                s.send(p)
                sent += 1
            except zmq.Again:
                unsent += 1
    conn.send({"sent": sent, "unsent": unsent, "send_s": time.perf_counter() - t0})
    conn.recv()  # the fan-in is over
    conn.send({})
    conn.recv()  # the end: queued messages must leave before the process does
    for s in socks:
        s.close(linger=0)
    ctx.term()


# ---------------------------------------------------------------------------- one run


class _Child:
    def __init__(self, ctx: Any, target: Any, *args: Any) -> None:
        self.conn, there = ctx.Pipe()
        self.proc = ctx.Process(target=target, args=(*args[:1], there, *args[1:]),
                                daemon=True)
        self.proc.start()
        there.close()

    def get(self, timeout: float, what: str) -> dict[str, Any]:
        if not self.conn.poll(timeout):
            raise WorkerFailed(f"no report ({what}) within {timeout:.0f} s")
        rep: dict[str, Any] = self.conn.recv()
        if "error" in rep:
            raise WorkerFailed(f"{what}: {rep['error']}")
        return rep

    def put(self, msg: Any) -> None:
        try:
            self.conn.send(msg)
        except OSError:
            pass

    def end(self) -> None:
        self.proc.join(timeout=5)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join(timeout=5)


def run_once(system: str, peers: int, messages: int, size: int = 64, quiet_s: float = 10.0,
             timeout: float = 120.0, per_process: int = PER_PROCESS, sources: int = 1,
             placement: str = "spread", progress: Progress = lambda _: None
             ) -> dict[str, Any]:
    """One fan-in of ``system`` (``a3m`` or ``pyzmq``) from ``peers`` producers."""
    ctx = mp.get_context("spawn")
    rx_cpus, tx_cpus = cpus_for(placement)
    t_start = time.perf_counter()
    with data_plane(system):
        col = _Child(ctx, _collector, system, peers, messages, quiet_s, timeout, rx_cpus)
    children = [col]
    out: dict[str, Any] = {"system": system, "peers": peers, "messages_each": messages,
                           "size": size, "sources": sources}
    try:
        start = col.get(60, "collector start")
        address = tuple(start["address"])
        out.update(path=start.get("path"), engine=start.get("engine"),
                   offload=start.get("offload"))
        prods = []
        with data_plane(system):
            for first in range(0, peers, per_process):
                count = min(per_process, peers - first)
                prods.append(_Child(ctx, _producers, system, first, count, address, messages,
                                    size, sources, timeout, tx_cpus))
        children += prods
        made = [p.get(max(120.0, timeout), "producers start") for p in prods]
        out["producer_path"] = one_path([m.get("path") for m in made])
        progress(f"fanin {system} {peers}: {len(prods)} producer process(es) ready, linking")
        go = time.time() + 0.2
        col.put({"go": go})
        for p in prods:
            p.put({"go": go})
        link_deadline = timeout + 30
        reps = [p.get(link_deadline, "producers link") for p in prods]
        crep = col.get(link_deadline, "collector link")
        linked = sum(r["linked"] for r in reps)
        lasts = [r["last_linked"] for r in reps if r["last_linked"] is not None]
        link_s = crep["collector_link_s"]
        if link_s is not None and linked == peers and lasts:
            link_s = max(link_s, max(lasts) - go)
        elif linked < peers:
            link_s = None
        out.update(link_s=None if link_s is None else round(link_s, 3),
                   linked=min(linked, crep["collector_links"]),
                   link_timed_out=link_s is None)
        progress(f"fanin {system} {peers}: linked {out['linked']} in "
                 f"{out['link_s'] if link_s is not None else 'time-out'} s; quiet "
                 f"{quiet_s:g} s")
        col.put("quiet")
        q = col.get(quiet_s + 60, "collector quiet")
        out.update(idle_cpu_pct=q["idle_cpu_pct"], rx_drops_quiet=q["rx_drops_quiet"],
                   kib_per_peer=q["kib_per_peer"])
        col.put("fan-in")
        col.get(30, "collector fan-in")
        for p in prods:
            p.put("send")
        sent = [p.get(timeout + 60, "producers send") for p in prods]
        total = sum(r["sent"] for r in sent)
        col.put({"sent": total})
        f = col.get(2 * timeout + 60, "collector fan-in")
        out.update(sent=total, unsent=sum(r["unsent"] for r in sent),
                   received=f["received"], lost=total - f["unique"],
                   duplicates=f["duplicates"], phantoms=f["phantoms"],
                   msgs_per_s=f["msgs_per_s"], busy_cpu_us_per_msg=f["busy_cpu_us_per_msg"],
                   rx_drops=f["rx_drops"], rx_drops_fan_in=f.get("rx_drops_fan_in"),
                   recv_timed_out=f["recv_timed_out"],
                   send_s=round(max(r["send_s"] for r in sent), 3))
        out["exact"] = (out["lost"] == 0 and out["duplicates"] == 0 and out["phantoms"] == 0
                        and out["unsent"] == 0 and not out["link_timed_out"])
        if "collector_stats" in f:
            out["collector_stats"] = f["collector_stats"]
            out["collector_counts"] = f["collector_counts"]
        for p in prods:
            p.put("counts")
        after = [p.get(60, "producers' counts") for p in prods]
        if system.startswith("a3m"):
            out["producer_counts"] = {
                "link": {k: sum(r["counts"][k] for r in reps) for k in (*COUNTERS, "turns")},
                "after_link": {k: sum(r["counts"][k] for r in after)
                               for k in (*COUNTERS, "turns")}}
        progress(f"fanin {system} {peers}: {out['msgs_per_s']} msg/s "
                 f"({out['busy_cpu_us_per_msg']} us CPU/msg), quiet CPU "
                 f"{out['idle_cpu_pct']} %, {out['kib_per_peer']} KiB/peer, drops "
                 f"{out['rx_drops']}, exact={out['exact']}"
                 + (f", path {out['path']}" if out.get("path") else ""))
    except WorkerFailed as exc:
        out["error"] = str(exc)
        out["exact"] = False
        progress(f"fanin {system} {peers}: {exc}")
    finally:
        for c in children:
            c.put("end")
        for c in children:
            c.end()
    out["elapsed_s"] = round(time.perf_counter() - t_start, 1)
    return out


def run_fanin(peer_counts: tuple[int, ...], messages: int | None = None, size: int = 64,
              quiet_s: float = 10.0, timeout: float = 120.0, per_process: int = PER_PROCESS,
              sources: int = 1, placement: str = "spread", baselines: bool = True,
              progress: Progress = lambda _: None, paths: str = "native") -> dict[str, Any]:
    """A3M on each of ``paths``' data planes (and pyzmq, in the same invocation) for each
    number of peers. The top level holds the figures of the last (largest given) number of
    peers for the first A3M system, pyzmq's under ``baselines``, every system's under
    ``systems``; ``runs`` holds every run."""
    systems = a3m_systems(paths)
    if baselines:
        try:
            import zmq  # noqa: F401

            systems.append("pyzmq")
        except ImportError:
            pass
    runs = []
    for n in peer_counts:
        each = messages or default_messages(n)
        for system in systems:
            runs.append(run_once(system, n, each, size, quiet_s, timeout, per_process,
                                 sources, placement, progress))
    last = peer_counts[-1]
    top = next(r for r in runs if r["system"] == systems[0] and r["peers"] == last)
    result: dict[str, Any] = {"workload": "fanin", "peers": last, "size": size,
                              "messages": top["messages_each"] * last,
                              "placement": placement, "sources": sources,
                              "quiet_s": quiet_s, "timeout_s": timeout, "paths": paths,
                              "node_options": _node_options(),
                              "socket_options": _socket_options()}
    keys = ("link_s", "idle_cpu_pct", "kib_per_peer", "rx_drops", "msgs_per_s",
            "busy_cpu_us_per_msg", "lost", "duplicates", "exact", "error", "path", "engine",
            "offload")
    for key in ("sent", "received", "phantoms", "unsent", *keys):
        if key in top:
            result[key] = top[key]
    result["baselines"] = {r["system"]: {k: r.get(k) for k in keys if k in r}
                           for r in runs if not r["system"].startswith("a3m")
                           and r["peers"] == last}
    result["systems"] = {r["system"]: {k: r.get(k) for k in keys if k in r}
                         for r in runs if r["peers"] == last}
    result["runs"] = runs
    result["all_exact"] = all(r.get("exact") for r in runs)
    result["machine"] = machine()
    return result


def sweep_plot(result: dict[str, Any], path: str, x: str, x_label: str,
               figures: tuple[tuple[str, str], ...], note: str, from_zero: bool = False
               ) -> str:
    """Each of ``figures`` (key, title) against ``x`` (the runs' key: peers, SUBs), one line
    per system (A3M beside pyzmq), and in the last panel ``note`` (its ``{machine}``: the
    machine's line) and the data planes. ``from_zero``: every y axis starts at 0."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    fig = Figure(figsize=(11, 6.5))
    axes = fig.subplots(2, 3).flatten()
    styles = {"a3m": "o-", "a3m-python": "^-.", "pyzmq": "s--"}
    systems = list(dict.fromkeys(r["system"] for r in result["runs"]))
    for ax, (key, label) in zip(axes, figures, strict=False):
        for system in systems:
            rows = [r for r in result["runs"] if r["system"] == system
                    and isinstance(r.get(key), (int, float))]
            if rows:
                ax.plot([r[x] for r in rows], [r[key] for r in rows],
                        styles.get(system, "x:"), label=system)
        ax.set_xscale("log")
        if from_zero:
            ax.set_ylim(bottom=0)
        ax.set_xlabel(x_label)
        ax.set_title(label, fontsize="medium")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize="small")
    ax = axes[-1]
    ax.axis("off")
    m = result.get("machine", {})
    machine_line = (f"{m.get('cpus', '?')} CPUs, Python {m.get('python', '?')}, "
                    f"compiled={m.get('compiled')}")
    text = note.replace("{machine}", machine_line) + "\n" + planes_text(result["runs"])
    ax.text(0, 0.5, text, fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    return path


def plot(result: dict[str, Any], path: str) -> str:
    """Each figure against the number of peers, A3M beside pyzmq."""
    return sweep_plot(result, path, "peers", "peers", FIGURES,
                      f"fan-in of {result['size']} B messages\n{{machine}}\n"
                      f"placement {result.get('placement')}, "
                      f"{result.get('sources', 1)} source address(es)")
