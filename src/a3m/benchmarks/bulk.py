"""``a3m bench bulk``: PUSH -> PULL across a real link of a chosen MTU (1500 by default).

Two network namespaces joined by a veth pair (:class:`a3m.testing.netem.VethPath`): a real
kernel path both ways, not loopback's 64 KiB datagrams. The receiver runs in namespace ``b``,
the sender in ``a``, one process each, pinned to one CPU each; the systems run one after the
other on the same link, in the same run:

- ``a3m``: A3M PUSH/PULL, secure (the default);
- ``a3m-plain``: the same with ``secure=False``;
- ``...-python``: an A3M system on the Python data plane (``A3M_NATIVE=0``) instead of the
  native one (``a3m.NATIVE``), beside it in the same run (``--paths native,python``);
- ``pyzmq``: PUSH/PULL over TCP;
- ``udp``: raw UDP, one ``sendto`` per datagram of at most MTU - 100 bytes (a message larger
  than that goes as several), no flow control: the receiver's rate is what it read, and the
  share it lost is reported beside it.

Every message carries its number in its first 8 bytes; the receiver checks each arrived once
(A3M, pyzmq). Receiver-side counters explain a figure: datagrams in, duplicates, the
kernel's receive-buffer drops in the receiver's namespace; and the sender's: datagrams out,
retransmissions, REQSLOTS sent, slot stalls (waits for a grant with messages queued).
Workers are this module run as a script (``python -m a3m.benchmarks.bulk pull|push ...``),
each printing one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import socket
import struct
import sys
import time
from collections.abc import Callable
from typing import Any

from a3m.benchmarks.emulated import _pair, _pin, _ready
from a3m.testing.netem import NetemUnavailable, VethPath, veth_unavailable

SYSTEMS = ("a3m", "a3m-plain", "pyzmq", "udp")
#: A3M with UDP segmentation offload on (``A3M_UDP_OFFLOAD=on``: GSO sends, GRO reads; off
#: by default), measured instead of or beside the default (``--offload on|both``).
OFFLOAD = ("a3m-offload", "a3m-plain-offload")
SIZES = (64, 1024, 65536, 1 << 20)
PORT = 7700
#: Messages per size unless given: enough bytes to take a few seconds at A3M's rate.
DEFAULT_MESSAGES = {64: 200_000, 1024: 50_000, 65536: 2000, 1 << 20: 128}
IDX = struct.Struct(">Q")
DONE = b"A3M-BULK-DONE"
#: Sender counters reported from A3M's Exon stats.
SENDER_KEYS = ("datagrams_out", "datagrams_in", "tokens_sent", "retransmits",
               "fast_retransmits", "spurious_retransmits", "probe_timeouts",
               "congestion_events", "reqslots_sent", "reqslots_retransmits", "slot_stalls",
               "pacer_holds")
RECEIVER_KEYS = ("datagrams_in", "datagrams_out", "duplicates", "delivered")


def default_messages(size: int) -> int:
    """Messages to send at ``size``: about a quarter-second's worth at loopback rates for
    small ones, 64-128 MiB for large ones."""
    if size in DEFAULT_MESSAGES:
        return DEFAULT_MESSAGES[size]
    return max(16, min(200_000, (64 << 20) // max(1, size)))


# ---------------------------------------------------------------------- workers


class _Seen:
    """Which message numbers arrived, and how many arrived twice or out of range."""

    def __init__(self, n: int) -> None:
        self.seen = bytearray(n)
        self.twice = 0
        self.foreign = 0

    def add(self, payload: bytes) -> None:
        i = IDX.unpack_from(payload)[0] if len(payload) >= 8 else -1
        if not 0 <= i < len(self.seen):
            self.foreign += 1
        elif self.seen[i]:
            self.twice += 1
        else:
            self.seen[i] = 1

    def report(self) -> dict[str, Any]:
        got = sum(self.seen)
        return {"distinct": got, "missing": len(self.seen) - got, "twice": self.twice,
                "foreign": self.foreign,
                "exact": got == len(self.seen) and not self.twice and not self.foreign}


def _receive(recv: Callable[[], bytes], messages: int) -> tuple[float, float, _Seen]:
    seen = _Seen(messages)
    seen.add(recv())
    t0 = time.perf_counter()
    for _ in range(messages - 1):
        seen.add(recv())
    return t0, time.perf_counter(), seen


def _a3m_system(system: str) -> tuple[bool, bool] | None:
    """(secure, offload) for an A3M system name, None for the others."""
    if not system.startswith("a3m"):
        return None
    if system.endswith("-python"):
        system = system[:-len("-python")]
    return not system.startswith("a3m-plain"), system.endswith("-offload")


def _a3m_node(name: str, bind: str, system: str) -> Any:
    import a3m  # (a "-python" system's worker runs with A3M_NATIVE=0: run_bulk)

    secure, offload = _a3m_system(system) or (True, False)
    if offload:
        os.environ["A3M_UDP_OFFLOAD"] = "on"  # read as the socket is made
    else:
        os.environ.pop("A3M_UDP_OFFLOAD", None)  # as shipped (native: NATIVE_OFFLOAD)
    return a3m.Node(name, bind=bind, secure=secure)


def _path(node: Any, messages: int, cpu0: float) -> dict[str, Any]:
    """Which data plane ran, its offload, and the process's CPU per message so far."""
    import a3m

    io = node._driver._io
    counters = io.counters() if hasattr(io, "counters") else {}
    return {"path": "native" if a3m.NATIVE else "python",
            "offload": {"gso": io.gso, "gro": io.gro}, "io_counters": counters,
            "cpu_us_per_msg": round((time.process_time() - cpu0) / messages * 1e6, 2)}


def pull(system: str, host: str, port: int, messages: int, size: int) -> dict[str, Any]:
    """Receive ``messages`` of ``size`` bytes; the rate from the first to the last."""
    extra: dict[str, Any] = {}
    if _a3m_system(system) is not None:
        cpu0 = time.process_time()
        with _a3m_node("bulk-sink", f"{host}:{port}", system) as node:
            import a3m

            sock = node.socket(a3m.PULL, "in")
            _ready()
            t0, t1, seen = _receive(lambda: sock.recv(timeout=120), messages)
            st = node.stats
            extra = {k: st["exon"][k] for k in RECEIVER_KEYS}
            extra["rx_drops"] = st["rx_drops"]
            io = node._driver._io
            extra.update(_path(node, messages, cpu0), gro_reads=io.gro_reads)
    elif system == "pyzmq":
        import zmq

        ctx = zmq.Context()
        s = ctx.socket(zmq.PULL)
        s.RCVTIMEO = 120_000
        s.bind(f"tcp://{host}:{port}")
        _ready()
        t0, t1, seen = _receive(s.recv, messages)
        s.close(linger=0)
        ctx.term()
    else:
        return _pull_udp(host, port, size)
    elapsed = max(t1 - t0, 1e-9)
    n = messages - 1  # the first message starts the clock
    return {"received": messages, "msgs_per_s": round(n / elapsed),
            "mb_per_s": round(n * size / elapsed / 1e6, 2), **seen.report(), **extra}


def _pull_udp(host: str, port: int, size: int) -> dict[str, Any]:
    from a3m.runtime.driver import SOCKET_BUFFER_BYTES, udp_drops

    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, SOCKET_BUFFER_BYTES)
    s.bind((host, port))
    buf = bytearray(65536)
    recv = s.recv_into
    _ready()
    s.settimeout(120)
    n = recv(buf)
    t0 = t1 = time.perf_counter()
    datagrams, nbytes = 1, n
    s.settimeout(2.0)  # the sender's DONE may be lost: two quiet seconds end the run too
    while True:
        try:
            n = recv(buf)
        except TimeoutError:
            break
        if n == len(DONE) and buf[:n] == DONE:
            break
        t1 = time.perf_counter()
        datagrams += 1
        nbytes += n
    drops = udp_drops(s)
    s.close()
    elapsed = max(t1 - t0, 1e-9)
    return {"datagrams_in": datagrams, "bytes_in": nbytes, "rx_drops": drops,
            "mb_per_s": round((nbytes - min(nbytes, size)) / elapsed / 1e6, 2),
            "msgs_per_s": round((nbytes / size - 1) / elapsed)}


def push(system: str, host: str, port: int, messages: int, size: int, mtu: int
         ) -> dict[str, Any]:
    """Send ``messages`` of ``size`` bytes, each numbered in its first 8 bytes."""
    pad = b"b" * max(0, size - IDX.size)
    pack = IDX.pack
    t0 = time.perf_counter()
    if _a3m_system(system) is not None:
        cpu0 = time.process_time()
        with _a3m_node("bulk-source", "0.0.0.0:0", system) as node:
            import a3m

            node.associate("bulk-sink", (host, port))
            sock = node.socket(a3m.PUSH, "out")
            sock.link(("bulk-sink", "in"))
            if not sock.wait_linked(timeout=30):
                raise RuntimeError("no link to the sink")
            t0 = time.perf_counter()
            for i in range(messages):
                sock.send(pack(i) + pad, timeout=120)
            if not node.flush(timeout=300):
                raise RuntimeError("not every message was acknowledged in 300 s")
            elapsed = time.perf_counter() - t0
            st = node.stats["exon"]
            out: dict[str, Any] = {k: st.get(k, 0) for k in SENDER_KEYS}
            out["send_s"] = round(elapsed, 3)
            out["reqslots_per_1k_msgs"] = round(1000 * st["reqslots_sent"] / messages, 2)
            out["recovery"] = node._proto.path_stats("bulk-sink")
            io = node._driver._io
            out.update(_path(node, messages, cpu0), gso_sends=io.gso_sends,
                       gso_datagrams=io.gso_datagrams, gso_refused=io.gso_refused)
            return out
    if system == "pyzmq":
        import zmq

        ctx = zmq.Context()
        s = ctx.socket(zmq.PUSH)
        s.connect(f"tcp://{host}:{port}")
        for i in range(messages):
            s.send(pack(i) + pad)
        s.close(linger=-1)
        ctx.term()
        return {"send_s": round(time.perf_counter() - t0, 3)}
    return _push_udp(host, port, messages, size, mtu)


def _push_udp(host: str, port: int, messages: int, size: int, mtu: int) -> dict[str, Any]:
    from a3m.runtime.driver import SOCKET_BUFFER_BYTES

    dsize = min(size, mtu - 100)
    per_msg = -(-size // dsize)
    last = size - (per_msg - 1) * dsize
    full, short = b"u" * dsize, b"u" * last
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SOCKET_BUFFER_BYTES)
    s.connect((host, port))
    send = s.send
    errors = 0
    t0 = time.perf_counter()
    for _ in range(messages):
        for _ in range(per_msg - 1):
            try:
                send(full)
            except OSError:
                errors += 1
        try:
            send(short)
        except OSError:
            errors += 1
    elapsed = time.perf_counter() - t0
    for _ in range(5):
        time.sleep(0.05)
        try:
            s.send(DONE)
        except OSError:
            break  # the receiver is gone already (its socket answered port unreachable)
    s.close()
    return {"datagrams_out": messages * per_msg, "datagram_bytes": dsize,
            "send_errors": errors, "send_s": round(elapsed, 3)}


def _worker(argv: list[str]) -> None:
    p = argparse.ArgumentParser(prog="a3m.benchmarks.bulk")
    p.add_argument("role", choices=("push", "pull"))
    p.add_argument("system", choices=[*SYSTEMS, *OFFLOAD, *(s + "-python" for s in (*SYSTEMS[:2], *OFFLOAD))])
    p.add_argument("host")
    p.add_argument("--port", type=int, default=PORT)
    p.add_argument("--size", type=int, default=1024)
    p.add_argument("--messages", type=int, default=1000)
    p.add_argument("--mtu", type=int, default=1500)
    p.add_argument("--cpu", type=int, default=-1)
    a = p.parse_args(argv)
    _pin(a.cpu)
    cpu0 = time.process_time()
    ru0 = resource.getrusage(resource.RUSAGE_SELF)
    try:
        if a.role == "pull":
            out = pull(a.system, a.host, a.port, a.messages, a.size)
        else:
            out = push(a.system, a.host, a.port, a.messages, a.size, a.mtu)
    except Exception as exc:  # reported, not raised: the driver shows it beside the others
        out = {"error": f"{type(exc).__name__}: {exc}"}
    # the process's CPU time, all threads (set-up included): with the rate, the cost of a
    # message in units the clock speed moves less than the rate
    out["cpu_s"] = round(time.process_time() - cpu0, 3)
    ru = resource.getrusage(resource.RUSAGE_SELF)
    # context switches of the whole process (its threads handing the interpreter over, and
    # waits): a count the CPU's speed does not move
    out["ctx_switches"] = {"voluntary": ru.ru_nvcsw - ru0.ru_nvcsw,
                           "involuntary": ru.ru_nivcsw - ru0.ru_nivcsw}
    print(json.dumps(out), flush=True)


# ---------------------------------------------------------------------- driver


def available(offload: str = "off", paths: str = "native") -> list[str]:
    """The systems installed here (A3M and raw UDP always); ``offload``: A3M with UDP
    segmentation offload as shipped (``off``: the native path's default GSO, none on the
    Python path), ``on``, or ``both`` one after the other; ``paths``: the data planes, one
    or both of ``native`` and ``python`` (native only where ``a3m.NATIVE``)."""
    import a3m

    a3ms = {"off": ["a3m", "a3m-plain"], "on": list(OFFLOAD),
            "both": ["a3m", "a3m-offload", "a3m-plain", "a3m-plain-offload"]}[offload]
    want = [p.strip() for p in paths.split(",") if p.strip()]
    if not a3m.NATIVE:
        want = ["python"]
    out = [s if p == "native" else s + "-python" for s in a3ms for p in want]
    try:
        import zmq  # noqa: F401

        out.append("pyzmq")
    except ImportError:
        pass
    return out + ["udp"]


def run_bulk(sizes: tuple[int, ...] = SIZES, mtu: int = 1500,
             systems: list[str] | None = None, messages: int | None = None,
             progress: Callable[[str], None] = lambda s: None, offload: str = "off"
             ) -> dict[str, Any]:
    """Every system at every size over one veth pair at ``mtu``; raises
    :class:`NetemUnavailable` (not root, no ``ip``) before anything is made."""
    why = veth_unavailable()
    if why is not None:
        raise NetemUnavailable(why)
    systems = systems or available(offload)
    rows: list[dict[str, Any]] = []
    port = PORT
    with VethPath(mtu) as path:
        for size in sizes:
            n = messages or default_messages(size)
            for system in systems:
                port += 1
                progress(f"bulk {system} {n} x {size} B, MTU {mtu}")
                before = path.udp_counters("b")
                common = ["--port", str(port), "--size", str(size), "--messages", str(n),
                          "--mtu", str(mtu)]
                r = _pair(path, ["pull", system, path.addr_b, *common, "--cpu", "0"],
                          ["push", system, path.addr_b, *common, "--cpu", "1"],
                          timeout=900, module="a3m.benchmarks.bulk",
                          env={"A3M_NATIVE": "0"} if system.endswith("-python") else None)
                after = path.udp_counters("b")
                srv = r.pop("server", {})
                row = {"system": system, "size": size, "messages": n, **srv, "sender": r,
                       "kernel_rcvbuf_drops": (after.get("RcvbufErrors", 0)
                                               - before.get("RcvbufErrors", 0))}
                if "error" in r and "error" not in row:
                    row["error"] = "sender: " + r["error"]
                rows.append(row)
                progress(f"  -> {row.get('mb_per_s', row.get('error'))} MB/s, "
                         f"{row.get('msgs_per_s', '-')} msg/s")
    return {"workload": "bulk", "mtu": mtu, "path": path.describe(), "systems": systems,
            "sizes": list(sizes), "results": rows, "ratios": ratios(rows)}


def ratios(rows: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Per size, each A3M row's MB/s over pyzmq's and over raw UDP's in the same run."""
    out: dict[str, dict[str, float]] = {}
    rate = {(r["system"], r["size"]): r.get("mb_per_s") for r in rows}
    for (system, size), mb in rate.items():
        if not system.startswith("a3m") or not mb:
            continue
        peers = ["pyzmq", "udp"]
        if system.endswith("-offload"):
            peers.append(system[:-len("-offload")])  # what offload gave, in the same run
        for peer in peers:
            base = rate.get((peer, size))
            if base:
                out.setdefault(str(size), {})[f"{system}/{peer}"] = round(mb / base, 3)
    return out


def plot(result: dict[str, Any], path: str) -> None:
    """MB/s and messages/s against message size, one line per system."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from a3m.benchmarks.plot import finish

    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for system in result["systems"]:
        mine = sorted((r for r in result["results"]
                       if r["system"] == system and r.get("mb_per_s")),
                      key=lambda r: r["size"])
        xs = [r["size"] for r in mine]
        axes[0].plot(xs, [r["mb_per_s"] for r in mine], marker="o", label=system)
        axes[1].plot(xs, [r["msgs_per_s"] for r in mine], marker="o", label=system)
    for ax, ylabel in zip(axes, ("MB/s", "messages/s"), strict=True):
        ax.set(xscale="log", yscale="log", xlabel="message bytes", ylabel=ylabel,
               title=f"PUSH -> PULL over a veth pair, MTU {result['mtu']}")
    finish(fig, axes, path)


if __name__ == "__main__":
    _worker(sys.argv[1:])
