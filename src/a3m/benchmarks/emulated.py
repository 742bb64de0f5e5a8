"""Benchmarks across an emulated path (:mod:`a3m.testing.netem`): A3M beside pyzmq and pynng.

``rpc``: C requests in flight between one pair of nodes for a fixed time (A3M DEALER/ROUTER,
pyzmq DEALER/ROUTER over one TCP connection, pynng REQ/REP with C contexts); round trips/s and
latency percentiles. ``stream``: N one-way 64 B messages (PUSH/PULL), messages/s.

Each system's server runs in namespace ``b`` and its client in ``a``, one after the other on
the same path, pinned to one CPU each (the forwarder takes what is left). A path with no delay
and nft available is the lossy loopback namespace (the kernel's own loopback, as in the issue's
first measurements); otherwise the TUN emulator. Workers are this module run as a script
(``python -m a3m.benchmarks.emulated serve|call|push|pull SYSTEM ...``): they print one JSON
line.
"""

from __future__ import annotations

import argparse
import json
import os
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from a3m.testing.netem import (
    LossyLoopback,
    NetemUnavailable,
    NetPath,
    VethPath,
    model_path,
    nft_unavailable,
    unavailable,
)

SYSTEMS = ("a3m", "pyzmq", "pynng")
PORT = 7600
HDR = struct.Struct(">Qd")  # request id, send time (client clock)


# ---------------------------------------------------------------------- workers


def _node_options() -> dict[str, Any]:
    """Exon options for every A3M node of the run, as JSON in ``A3M_EMULATED_NODE_OPTIONS``
    (e.g. ``{"pacing": false}``: the same build without pacing, beside it in one session)."""
    return dict(json.loads(os.environ.get("A3M_EMULATED_NODE_OPTIONS", "{}")))


def _pin(cpu: int) -> None:
    if cpu >= 0 and hasattr(os, "sched_setaffinity"):
        try:
            os.sched_setaffinity(0, {cpu % (os.cpu_count() or 1)})
        except OSError:
            pass


def _ready() -> None:
    print("READY", flush=True)


def serve(system: str, host: str, concurrency: int, duration: float, ordered: bool = False
          ) -> dict[str, Any]:
    """Echo every request until the client is done (or ``duration`` + a margin)."""
    end = time.monotonic() + duration + 30
    served = 0
    if system == "a3m":
        import a3m

        with a3m.Node("rpc-server", bind=f"{host}:{PORT}", **_node_options()) as node:
            router = node.socket(a3m.ROUTER, "rpc", ordered=ordered)
            _ready()
            while time.monotonic() < end:
                try:
                    m = router.recv_msg(timeout=1.0)
                except a3m.Timeout:
                    continue  # a long stall under loss: the client says "done" when it is
                if m.payload == b"done":
                    break
                router.send(m.payload, to=m.source, timeout=10)
                served += 1
            st = node.stats["exon"]
            extra = {k: st[k] for k in ("retransmits", "probe_timeouts", "fast_retransmits",
                                        "duplicates", "datagrams_out")}
            node.close(timeout=2)
            return {"served": served, **extra}
    elif system == "pyzmq":
        import zmq

        ctx = zmq.Context()
        s = ctx.socket(zmq.ROUTER)
        s.bind(f"tcp://{host}:{PORT}")
        _ready()
        s.RCVTIMEO = 1000
        while time.monotonic() < end:
            try:
                ident, payload = s.recv_multipart()
            except zmq.Again:
                continue  # a long stall under loss: the client says "done" when it is
            if payload == b"done":
                break
            s.send_multipart([ident, payload])
            served += 1
        s.close(linger=0)
        ctx.term()
    else:
        import pynng

        with pynng.Rep0(listen=f"tcp://{host}:{PORT}", recv_timeout=1000) as s:
            _ready()
            stop = threading.Event()
            counts = [0] * concurrency

            def loop(i: int) -> None:
                ctx = s.new_context()
                while not stop.is_set() and time.monotonic() < end:
                    try:
                        q = ctx.recv()
                    except pynng.Timeout:
                        continue
                    if q == b"done":
                        stop.set()
                        ctx.send(b"ok")
                        break
                    ctx.send(q)
                    counts[i] += 1

            threads = [threading.Thread(target=loop, args=(i,), daemon=True)
                       for i in range(concurrency)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(duration + 40)
            served = sum(counts)
    return {"served": served}


def _in_flight(send: Callable[[bytes], Any], recv: Callable[[], bytes], concurrency: int,
               duration: float, pad: bytes, lat: list[float]) -> float:
    """Keep ``concurrency`` requests in flight over one asynchronous socket (each reply sends
    the next request) for ``duration`` seconds; latencies into ``lat``; the time it took."""
    clock = time.perf_counter
    t0 = clock()
    for i in range(concurrency):
        send(HDR.pack(i, clock()) + pad)
    n = concurrency
    while clock() - t0 < duration:
        sent_at = HDR.unpack_from(recv())[1]  # (before the clock is read)
        lat.append(clock() - sent_at)
        send(HDR.pack(n, clock()) + pad)
        n += 1
    return clock() - t0


def call(system: str, host: str, concurrency: int, duration: float, size: int,
         ordered: bool = False) -> dict[str, Any]:
    """Keep ``concurrency`` requests in flight for ``duration`` seconds; time each."""
    pad = b"x" * max(0, size - HDR.size)
    lat: list[float] = []
    clock = time.perf_counter
    if system == "a3m":
        import a3m

        with a3m.Node("rpc-client", bind="0.0.0.0:0", **_node_options()) as node:
            node.associate("rpc-server", (host, PORT))
            d = node.socket(a3m.DEALER, "rpc", ordered=ordered)
            d.link(("rpc-server", "rpc"))
            if not d.wait_linked(timeout=30):
                raise RuntimeError("no link to the server")
            elapsed = _in_flight(lambda m: d.send(m, timeout=30), lambda: d.recv(timeout=30),
                                 concurrency, duration, pad, lat)
            stats = node.stats["exon"]
            d.send(b"done", timeout=5)
            node.flush(timeout=5)
            extra = {k: stats[k] for k in ("retransmits", "probe_timeouts", "fast_retransmits",
                                           "datagrams_out", "tokens_sent")}
            extra["recovery"] = node._proto.path_stats("rpc-server")
    elif system == "pyzmq":
        import zmq

        ctx = zmq.Context()
        s = ctx.socket(zmq.DEALER)
        s.RCVTIMEO = 120_000  # a reply missing for 2 minutes ends the run with an error
        s.connect(f"tcp://{host}:{PORT}")
        elapsed = _in_flight(s.send, s.recv, concurrency, duration, pad, lat)
        s.send(b"done")
        time.sleep(0.2)
        s.close(linger=0)
        ctx.term()
        extra = {}
    else:
        import pynng

        with pynng.Req0(dial=f"tcp://{host}:{PORT}", recv_timeout=60_000) as s:
            t0 = clock()
            lock = threading.Lock()

            def loop() -> None:
                ctx = s.new_context()
                mine = []
                while clock() - t0 < duration:
                    t = clock()
                    ctx.send(HDR.pack(0, t) + pad)
                    ctx.recv()
                    mine.append(clock() - t)
                with lock:
                    lat.extend(mine)

            threads = [threading.Thread(target=loop, daemon=True) for _ in range(concurrency)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(duration + 120)
            elapsed = clock() - t0
            ctx = s.new_context()
            ctx.send(b"done")
        extra = {}
    lat.sort()
    n = len(lat)

    def pct(p: float) -> float:
        return round(lat[min(n - 1, int(p * n))] * 1e3, 3) if n else 0.0

    return {"round_trips": n, "rt_per_s": round(n / elapsed, 1), "p50_ms": pct(0.5),
            "p99_ms": pct(0.99), "max_ms": round(lat[-1] * 1e3, 2) if n else 0.0, **extra}


def _count(recv: Callable[[], Any], messages: int) -> tuple[float, float, int]:
    """Receive ``messages``; (time of the first, time of the last, how many)."""
    recv()
    t0, got = time.perf_counter(), 1
    while got < messages:
        recv()
        got += 1
    return t0, time.perf_counter(), got


def pull(system: str, host: str, messages: int) -> dict[str, Any]:
    """Receive ``messages``; report the rate from the first to the last."""
    clock = time.perf_counter
    got = 0
    t0 = 0.0
    if system == "a3m":
        import a3m

        with a3m.Node("stream-sink", bind=f"{host}:{PORT}", **_node_options()) as node:
            sock = node.socket(a3m.PULL, "in")
            _ready()
            sock.recv(timeout=60)
            t0, got = clock(), 1
            last, stall, stall_at = t0, 0.0, 0
            tenth, t_tenth = max(1, messages // 10), 0.0
            step, progress = max(1, messages // 30), []  # when each 30th of it had come
            while got < messages:
                sock.recv(timeout=60)
                got += 1
                t = clock()
                if got == tenth:
                    t_tenth = t
                if not got % step:
                    progress.append(round(t - t0, 3))
                if t - last > stall:
                    stall, stall_at = t - last, got
                last = t
            st = node.stats["exon"]
            extra = {k: st[k] for k in ("datagrams_in", "duplicates", "datagrams_out")}
            # the longest wait between two messages, and the message it ended at: a stream
            # that lost most of its rate to one stall shows it here
            extra.update(longest_stall_ms=round(stall * 1e3, 1), stall_at=stall_at,
                         progress_s=progress)
            # the rate after the first tenth: the stream without its start (the window's and
            # the pacer's search for the path's rate, a large share of a short run)
            if t_tenth and last > t_tenth:
                extra["steady_msgs_per_s"] = round((got - tenth) / (last - t_tenth))
            t = clock()
            extra["close_clean"] = node.close(timeout=10)
            extra["close_s"] = round(clock() - t, 3)
    elif system == "pyzmq":
        import zmq

        ctx = zmq.Context()
        s = ctx.socket(zmq.PULL)
        s.bind(f"tcp://{host}:{PORT}")
        _ready()
        t0, last, got = _count(s.recv, messages)
        s.close(linger=0)
        ctx.term()
        extra = {}
    else:
        import pynng

        with pynng.Pull0(listen=f"tcp://{host}:{PORT}") as s:
            _ready()
            t0, last, got = _count(s.recv, messages)
        extra = {}
    # From the first message to the last: not to the end of the node's close (which waits
    # for the link's graceful end; counted in, a close that took 10 s once made a 2.3 s
    # stream read as 24 k msg/s instead of 130 k, the "slow first phase" of earlier notes)
    elapsed = last - t0
    return {"received": got, "msgs_per_s": round((got - 1) / elapsed) if elapsed else 0,
            **extra}


def push(system: str, host: str, messages: int, size: int) -> dict[str, Any]:
    data = b"s" * size
    if system == "a3m":
        import a3m

        with a3m.Node("stream-source", bind="0.0.0.0:0", **_node_options()) as node:
            node.associate("stream-sink", (host, PORT))
            sock = node.socket(a3m.PUSH, "out")
            sock.link(("stream-sink", "in"))
            if not sock.wait_linked(timeout=30):
                raise RuntimeError("no link to the sink")
            trace = _Trace(node, "stream-sink", os.environ.get("A3M_EMULATED_TRACE"))
            for i in range(messages):
                sock.send(data, timeout=60)
                trace.sent = i + 1
            t = time.perf_counter()
            node.flush(timeout=120)
            flush_s = time.perf_counter() - t
            trace.stop()
            st = node.stats["exon"]
            out = {"messages_per_datagram": round(st["tokens_sent"] / max(1, st["datagrams_out"]),
                                                  2),
                   **{k: st[k] for k in ("retransmits", "fast_retransmits", "probe_timeouts",
                                         "congestion_events", "pacer_holds",
                                         "datagrams_out", "datagrams_in")},
                   "recovery": node._proto.path_stats("stream-sink"),
                   "flush_s": round(flush_s, 3)}
            t = time.perf_counter()
            out["close_clean"] = node.close(timeout=10)
            out["close_s"] = round(time.perf_counter() - t, 3)
            return out
    if system == "pyzmq":
        import zmq

        ctx = zmq.Context()
        s = ctx.socket(zmq.PUSH)
        s.connect(f"tcp://{host}:{PORT}")
        for _ in range(messages):
            s.send(data)
        s.close(linger=-1)
        ctx.term()
        return {}
    import pynng

    with pynng.Push0(dial=f"tcp://{host}:{PORT}") as s:
        for _ in range(messages):
            s.send(data)
        time.sleep(1.0)  # NNG has no linger: let the last messages leave
    return {}


class _Trace:
    """With a file name (``A3M_EMULATED_TRACE``), the sender's path state every 20 ms as JSON
    lines: the messages sent, Exon's counters and the path's recovery state (the window,
    the rate estimate, the pacing phase). A diagnostic: the reads race the I/O thread."""

    def __init__(self, node: Any, peer: str, path: str | None) -> None:
        self.sent = 0
        self._done = threading.Event()
        self._thread: threading.Thread | None = None
        if path:
            self._thread = threading.Thread(target=self._run, args=(node, peer, path),
                                            daemon=True)
            self._thread.start()

    def _run(self, node: Any, peer: str, path: str) -> None:
        t0 = time.perf_counter()
        with open(path, "a") as f:
            f.write(json.dumps({"start": time.time(), "pid": os.getpid()}) + "\n")
            while not self._done.wait(0.02):
                try:
                    st = node.stats["exon"]
                    row = {"t": round(time.perf_counter() - t0, 3), "sent": self.sent,
                           **{k: st[k] for k in ("datagrams_out", "retransmits",
                                                 "probe_timeouts", "pacer_holds")},
                           **node._proto.path_stats(peer)}
                except Exception as e:  # (a racing read: note it, go on)
                    row = {"error": repr(e)}
                f.write(json.dumps(row) + "\n")

    def stop(self) -> None:
        self._done.set()
        if self._thread is not None:
            self._thread.join()


def _usage() -> dict[str, Any]:
    """This process's CPU time and context switches so far (the stream's sides report them:
    a CPU-bound side shows it here, a side that waited shows switches)."""
    import resource

    ru = resource.getrusage(resource.RUSAGE_SELF)
    return {"cpu_s": round(ru.ru_utime + ru.ru_stime, 3),
            "ctx_switches": {"voluntary": ru.ru_nvcsw, "involuntary": ru.ru_nivcsw}}


def _worker(argv: list[str]) -> None:
    p = argparse.ArgumentParser(prog="a3m.benchmarks.emulated")
    p.add_argument("role", choices=("serve", "call", "push", "pull"))
    p.add_argument("system", choices=SYSTEMS)
    p.add_argument("host")
    p.add_argument("--concurrency", type=int, default=1)
    p.add_argument("--duration", type=float, default=10.0)
    p.add_argument("--size", type=int, default=64)
    p.add_argument("--messages", type=int, default=100_000)
    p.add_argument("--cpu", type=int, default=-1)
    p.add_argument("--ordered", action="store_true")
    a = p.parse_args(argv)
    _pin(a.cpu)
    try:
        if a.role == "serve":
            out = serve(a.system, a.host, a.concurrency, a.duration, a.ordered)
        elif a.role == "call":
            out = call(a.system, a.host, a.concurrency, a.duration, a.size, a.ordered)
        elif a.role == "pull":
            out = pull(a.system, a.host, a.messages)
        else:
            out = push(a.system, a.host, a.messages, a.size)
        if a.role in ("push", "pull"):
            out.update(_usage())
    except Exception as exc:  # reported, not raised: the driver shows it beside the others
        out = {"error": f"{type(exc).__name__}: {exc}"}
    print(json.dumps(out), flush=True)


# ---------------------------------------------------------------------- driver


def available() -> list[str]:
    """The systems installed here (A3M always)."""
    out = ["a3m"]
    for name, mod in (("pyzmq", "zmq"), ("pynng", "pynng")):
        try:
            __import__(mod)
            out.append(name)
        except ImportError:
            pass
    return out


def open_path(loss_pct: float, delay_ms: float, jitter_ms: float, rate_mbit: float,
              seed: int, kind: str = "auto", model: str = "random", burst_len: float = 3.0,
              queue_ms: float = 2.0) -> NetPath | LossyLoopback:
    """The path to measure on: the lossy loopback namespace for random loss and ``delay 0``
    when nft is there (``kind`` "auto" or "loopback"), else the TUN emulator losing
    ``loss_pct`` the way ``model`` says (:func:`a3m.testing.netem.model_path`)."""
    if kind == "loopback" or (kind == "auto" and model == "random" and delay_ms == 0
                              and jitter_ms == 0 and rate_mbit == 0
                              and nft_unavailable() is None):
        return LossyLoopback(loss_pct)
    ab, ba = model_path(model, loss_pct / 100, delay_ms=delay_ms, jitter_ms=jitter_ms,
                        rate_mbit=rate_mbit, burst_len=burst_len, queue_ms=queue_ms)
    return NetPath(ab, ba, seed=seed)


def _pair(path: NetPath | LossyLoopback | VethPath, server: list[str], client: list[str],
          timeout: float, module: str = "a3m.benchmarks.emulated",
          env: dict[str, str] | None = None) -> dict[str, Any]:
    """Run ``module``'s worker ``server`` in namespace ``b``, then ``client`` in ``a`` once
    the server printed READY; the client's JSON line, the server's under ``"server"``.
    ``env``: variables set for both workers (beside this process's)."""
    me = [sys.executable, "-m", module]
    full = None if env is None else {**os.environ, **env}
    srv = path.popen("b", me + server, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                     text=True, env=full)
    try:
        assert srv.stdout is not None
        line = srv.stdout.readline()
        if not line.startswith("READY"):
            err = srv.stderr.read() if srv.stderr else ""
            return {"error": f"server did not start: {line.strip()} {err[-300:]}"}
        try:
            cli = subprocess.run(path.argv("a", me + client), capture_output=True, text=True,
                                 timeout=timeout, env=full)
        except subprocess.TimeoutExpired:
            return {"error": f"the client did not finish in {timeout:.0f} s"}
        try:
            result: dict[str, Any] = json.loads(cli.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            return {"error": f"client failed: {cli.stderr[-300:]}"}
        try:
            out, _ = srv.communicate(timeout=40)
            last = out.strip().splitlines()[-1] if out.strip() else "{}"
            result["server"] = json.loads(last)
        except (subprocess.TimeoutExpired, ValueError):
            pass
        return result
    finally:
        if srv.poll() is None:
            srv.kill()
            srv.wait()


def require_root() -> None:
    why = unavailable()
    if why is not None:
        raise NetemUnavailable(why)


def run_rpc(losses: list[float], delay_ms: float = 0.0, jitter_ms: float = 0.0,
            rate_mbit: float = 0.0, concurrency: int = 1, duration: float = 10.0,
            size: int = 64, systems: list[str] | None = None, seed: int = 1,
            orders: tuple[bool, ...] = (False, True), model: str = "random",
            progress: Callable[[str], None] = lambda s: None) -> dict[str, Any]:
    """Round trips over the emulated path, for each loss rate and system. A3M runs once per
    entry of ``orders``: DEALER and ROUTER with per-link order off (``False``: independent
    requests need none) and on (``True``: a lost request holds every later reply, as TCP
    does), so the cost of order shows beside the rest in one run."""
    require_root()
    systems = systems or available()
    rows = []
    for loss in losses:
        for system in systems:
            for ordered in (orders if system == "a3m" else (False,)):
                flags = ["--ordered"] if ordered and system == "a3m" else []
                name = system + (" ordered" if flags else
                                 " unordered" if system == "a3m" else "")
                path = open_path(loss, delay_ms, jitter_ms, rate_mbit, seed, model=model)
                with path:
                    progress(f"rpc {name} loss {loss} % ({model}) delay {delay_ms} ms "
                             f"x{concurrency}")
                    r = _pair(path, ["serve", system, path.addr_b, "--concurrency",
                                     str(concurrency), "--duration", str(duration), "--cpu",
                                     "0", *flags],
                              ["call", system, path.addr_b, "--concurrency", str(concurrency),
                               "--duration", str(duration), "--size", str(size), "--cpu", "1",
                               *flags], timeout=duration + 180)
                r.update(system=system, loss_pct=loss, path=path.describe(),
                         path_stats=path.stats)
                if system == "a3m":
                    r["ordered"] = ordered
                rows.append(r)
                progress(f"  -> {r.get('rt_per_s', r.get('error'))} rt/s, "
                         f"p99 {r.get('p99_ms')} ms")
    return {"workload": "rpc", "delay_ms": delay_ms, "jitter_ms": jitter_ms,
            "rate_mbit": rate_mbit, "concurrency": concurrency, "duration_s": duration,
            "size": size, "model": model, "a3m_orders": list(orders), "results": rows}


def run_stream(losses: list[float], delay_ms: float = 0.0, rate_mbit: float = 0.0,
               messages: int = 100_000, size: int = 64, systems: list[str] | None = None,
               seed: int = 1, models: tuple[str, ...] = ("random",), jitter_ms: float = 0.0,
               burst_len: float = 3.0, queue_ms: float = 2.0,
               progress: Callable[[str], None] = lambda s: None) -> dict[str, Any]:
    """One-way messages over the emulated path, for each loss model, loss rate and system.
    Each A3M row carries ``of_clean`` (its rate over A3M's on the clean path: no loss, the
    same delay and rate, no model) and ``of_model_at_0`` (over A3M's at 0 % in the same
    model: the queue's or the jitter's own cost taken out) when those rows were measured."""
    require_root()
    systems = systems or available()
    rows = []
    for model in models:
        for loss in losses:
            if loss == 0 and model in _CLEAN_AT_0 and any(
                    m in _CLEAN_AT_0 for m in models[:models.index(model)]):
                continue  # the same clean path, measured already
            for system in systems:
                path = open_path(loss, delay_ms, jitter_ms, rate_mbit, seed, model=model,
                                 burst_len=burst_len, queue_ms=queue_ms)
                with path:
                    progress(f"pushpull {system} {model} loss {loss} % delay {delay_ms} ms")
                    r = _pair(path, ["pull", system, path.addr_b, "--messages",
                                     str(messages), "--cpu", "0"],
                              ["push", system, path.addr_b, "--messages", str(messages),
                               "--size", str(size), "--cpu", "1"], timeout=600)
                    srv = r.pop("server", {})
                    r = {**srv, "sender": r}
                r.update(system=system, model=model, loss_pct=loss, path=path.describe(),
                         path_stats=path.stats)
                rows.append(r)
                progress(f"  -> {r.get('msgs_per_s', r.get('error'))} msg/s")
    _shares(rows)
    return {"workload": "pushpull-emulated", "delay_ms": delay_ms, "rate_mbit": rate_mbit,
            "jitter_ms": jitter_ms, "burst_len": burst_len, "queue_ms": queue_ms,
            "models": list(models), "messages": messages, "size": size, "results": rows}


#: Loss models whose path at 0 % is the clean path (no queue cut, no jitter added).
_CLEAN_AT_0 = ("random", "burst", "data", "ack")


def _shares(rows: list[dict[str, Any]]) -> None:
    """Each row's rate over its system's clean-path rate and over its model's 0 % rate."""
    def rate(system: str, models: tuple[str, ...]) -> float:
        for r in rows:
            if r["system"] == system and r["model"] in models and r["loss_pct"] == 0:
                return float(r.get("msgs_per_s") or 0)
        return 0.0

    for r in rows:
        if not r.get("msgs_per_s"):
            continue
        clean = rate(r["system"], _CLEAN_AT_0)
        own = clean if r["model"] in _CLEAN_AT_0 else rate(r["system"], (r["model"],))
        if clean:
            r["of_clean"] = round(r["msgs_per_s"] / clean, 3)
        if own:
            r["of_model_at_0"] = round(r["msgs_per_s"] / own, 3)


def plot(result: dict[str, Any], path: str) -> None:
    """Round trips/s (or messages/s) and p99 against loss, one line per system."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from a3m.benchmarks.plot import finish

    rows = result["results"]
    rpc = result["workload"] == "rpc"
    several = len(result.get("models", ())) > 1

    def line(r: dict[str, Any]) -> str:
        order = "" if "ordered" not in r else " ordered" if r["ordered"] else " unordered"
        return r["system"] + order + (f" ({r['model']})" if several else "")

    lines = sorted({line(r) for r in rows},
                   key=lambda name: (SYSTEMS.index(name.split()[0]), name))
    fig, axes = plt.subplots(1, 2 if rpc else 1, figsize=(10 if rpc else 5.5, 4), squeeze=False)
    metric = "rt_per_s" if rpc else "msgs_per_s"
    for name in lines:
        mine = sorted((r for r in rows if line(r) == name and metric in r),
                      key=lambda r: r["loss_pct"])
        xs = [r["loss_pct"] for r in mine]
        axes[0][0].plot(xs, [r[metric] for r in mine], marker="o", label=name)
        if rpc:
            axes[0][1].plot(xs, [r["p99_ms"] for r in mine], marker="o", label=name)
    title = (f"delay {result['delay_ms']} ms each way"
             + (f", {result['rate_mbit']} Mbit/s" if result.get("rate_mbit") else "")
             + (f", {result['concurrency']} in flight" if rpc else ""))
    axes[0][0].set(xlabel="loss %", ylabel="round trips/s" if rpc else "messages/s",
                   yscale="log", title=title)
    if rpc:
        axes[0][1].set(xlabel="loss %", ylabel="p99 ms", yscale="log", title="p99 latency")
    finish(fig, axes[0], path)


if __name__ == "__main__":
    _worker(sys.argv[1:])
