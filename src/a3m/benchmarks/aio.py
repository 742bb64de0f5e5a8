"""``a3m bench reqrep|pushpull --asyncio``: ``a3m.aio`` beside ``pyzmq.asyncio`` in the same
run, both sides in one process (one event loop) and across two processes, on the default
event loop and on uvloop where it is installed.

Counted as the blocking workloads count: REQ/REP round trips measured by the client (p50,
p99), PUSH/PULL messages received divided by the time from the first to the last one
received. Every system sends the same payload; a run that loses or duplicates a message is
reported as an error. REQ/REP runs also report their work per round trip
(:mod:`a3m.benchmarks.work`: the one process's, or each side's), with ``count`` the Python
calls and the system calls too.
"""

from __future__ import annotations

import asyncio
import multiprocessing as mp
import queue
import statistics
import time
from collections.abc import Callable, Coroutine
from typing import Any

from a3m.benchmarks.peers import installed
from a3m.benchmarks.procs import WorkerFailed, _pinned, run_pair
from a3m.benchmarks.reqrep import MAX_ROUND_TRIPS, latency_report
from a3m.benchmarks.work import UNITS, Work, hoist_why, total

Progress = Callable[[str], None]
SYSTEMS = ("a3m.aio", "pyzmq.asyncio")
LOOPS = ("asyncio", "uvloop")


def _run(main: Coroutine[Any, Any, Any], loop: str) -> Any:
    if loop == "uvloop":
        import uvloop

        return uvloop.run(main)
    return asyncio.run(main)


def _n(workload: str, messages: int) -> int:
    return min(messages, MAX_ROUND_TRIPS) if workload == "reqrep" else messages


# ------------------------------------------------------------------ a3m.aio

async def _a3m_rep(rep: Any, n: int) -> int:
    for _ in range(n):
        await rep.send(await rep.recv())
    return n


async def _a3m_req(req: Any, n: int, size: int, work: Work) -> dict[str, Any]:
    payload = b"q" * size
    samples = []
    wrong = 0
    clock = time.perf_counter
    work.start()
    for _ in range(n):
        t0 = clock()
        await req.send(payload)
        answer = await req.recv()
        samples.append(clock() - t0)
        wrong += answer != payload
    done = work.report(n)
    if wrong:
        raise RuntimeError(f"{wrong} wrong answers")
    return latency_report(samples, work=done)


async def _a3m_pull(pull: Any, n: int) -> dict[str, Any]:
    await pull.recv()
    first = time.perf_counter()
    for _ in range(n - 1):
        await pull.recv()
    last = time.perf_counter()
    return {"received": n, "msgs_per_s": (n - 1) / (last - first)}


async def _a3m_push(push: Any, n: int, size: int) -> None:
    payload = b"p" * size
    for _ in range(n):
        await push.send(payload)
    if not await push.close(timeout=120):
        raise RuntimeError("the PUSH socket did not close cleanly")


def _work(workload: str, count: bool) -> Work | None:
    """A REQ/REP run's :class:`Work`, made before its nodes (and before it says it is
    ready): the profiler reaches their threads, perf (``count``) attaches outside the
    stretch."""
    return Work(count) if workload == "reqrep" else None


def _options(busy_poll_s: float | None) -> dict[str, Any]:
    """The a3m.aio nodes' options: ``busy_poll_s`` when given (None: the node's default)."""
    return {} if busy_poll_s is None else {"busy_poll_s": busy_poll_s}


async def a3m_one_process(workload: str, messages: int, size: int,
                          count: bool = False, busy_poll_s: float | None = None
                          ) -> dict[str, Any]:
    import a3m
    import a3m.aio

    n = _n(workload, messages)
    work = _work(workload, count)
    opts = _options(busy_poll_s)
    async with a3m.aio.Node("bench-aio-rx", **opts) as rx, \
            a3m.aio.Node("bench-aio-tx", **opts) as tx:
        tx.associate(rx.id, rx.address)
        if work is not None:
            rep = rx.socket(a3m.REP, "rep")
            req = tx.socket(a3m.REQ, "req")
            req.link(rep.id)
            if not await req.wait_linked(timeout=30):
                raise RuntimeError("could not link")
            server = asyncio.create_task(_a3m_rep(rep, n))
            report = await _a3m_req(req, n, size, work)
            await server
        else:
            pull = rx.socket(a3m.PULL, "sink", capacity=4096)
            push = tx.socket(a3m.PUSH, "source")
            push.link(pull.id)
            if not await push.wait_linked(timeout=30):
                raise RuntimeError("could not link")
            sender = asyncio.create_task(_a3m_push(push, n, size))
            report = await _a3m_pull(pull, n)
            await sender
        report["rx_drops"] = rx.stats["rx_drops"]
    return report


def a3m_server(ready: Any, results: Any, workload: str, messages: int, size: int,
               loop: str = "asyncio", count: bool = False, busy_poll_s: float | None = None,
               **_: Any) -> None:
    async def main() -> dict[str, Any]:
        import a3m
        import a3m.aio

        work = _work(workload, count)
        async with a3m.aio.Node("bench-aio-rx", **_options(busy_poll_s)) as node:
            n = _n(workload, messages)
            if work is not None:
                rep = node.socket(a3m.REP, "rep")
                ready.put(node.address)
                await rep.send(await rep.recv())  # the first: the link's set-up
                work.start()
                await _a3m_rep(rep, n - 1)
                report = {"served": n, "work": work.report(n - 1)}
                await asyncio.sleep(0.2)
            else:
                pull = node.socket(a3m.PULL, "sink", capacity=4096)
                ready.put(node.address)
                report = await _a3m_pull(pull, n)
            report["rx_drops"] = node.stats["rx_drops"]
            return report

    try:
        results.put({"side": "receiver", **_run(main(), loop)})
    except Exception as exc:
        results.put({"side": "receiver", "error": repr(exc)})


def a3m_client(address: Any, results: Any, workload: str, messages: int, size: int,
               loop: str = "asyncio", count: bool = False, busy_poll_s: float | None = None,
               **_: Any) -> None:
    async def main() -> dict[str, Any]:
        import a3m
        import a3m.aio

        work = _work(workload, count)
        async with a3m.aio.Node("bench-aio-tx", **_options(busy_poll_s)) as node:
            node.associate("bench-aio-rx", tuple(address))
            n = _n(workload, messages)
            kind, peer = ((a3m.REQ, "bench-aio-rx/rep") if workload == "reqrep"
                          else (a3m.PUSH, "bench-aio-rx/sink"))
            sock = node.socket(kind, "out")
            sock.link(peer)
            if not await sock.wait_linked(timeout=30):
                raise RuntimeError("could not link")
            if work is not None:
                report = await _a3m_req(sock, n, size, work)
                await sock.close(timeout=10)
                return report
            await _a3m_push(sock, n, size)
            return {"sent": n}

    try:
        results.put({"side": "sender", **_run(main(), loop)})
    except Exception as exc:
        results.put({"side": "sender", "error": repr(exc)})


# ------------------------------------------------------------------ pyzmq.asyncio

async def _zmq_rep(rep: Any, n: int) -> None:
    for _ in range(n):
        await rep.send(await rep.recv())


async def _zmq_req(req: Any, n: int, size: int, work: Work) -> dict[str, Any]:
    payload = b"z" * size
    samples = []
    clock = time.perf_counter
    work.start()
    for _ in range(n):
        t0 = clock()
        await req.send(payload)
        if await req.recv() != payload:
            raise RuntimeError("wrong answer")
        samples.append(clock() - t0)
    return latency_report(samples, work=work.report(n))


async def _zmq_pull(pull: Any, n: int) -> dict[str, Any]:
    await pull.recv()
    first = time.perf_counter()
    for _ in range(n - 1):
        await pull.recv()
    last = time.perf_counter()
    return {"received": n, "msgs_per_s": (n - 1) / (last - first)}


async def _zmq_push(push: Any, n: int, size: int) -> None:
    payload = b"z" * size
    for _ in range(n):
        await push.send(payload)


async def zmq_one_process(workload: str, messages: int, size: int,
                          count: bool = False) -> dict[str, Any]:
    work = _work(workload, count)
    import zmq
    import zmq.asyncio

    n = _n(workload, messages)
    ctx = zmq.asyncio.Context()
    try:
        if workload == "reqrep":
            rx, tx = ctx.socket(zmq.REP), ctx.socket(zmq.REQ)
        else:
            rx, tx = ctx.socket(zmq.PULL), ctx.socket(zmq.PUSH)
        port = rx.bind_to_random_port("tcp://127.0.0.1")
        tx.connect(f"tcp://127.0.0.1:{port}")
        if work is not None:
            server = asyncio.create_task(_zmq_rep(rx, n))
            report = await _zmq_req(tx, n, size, work)
            await server
        else:
            sender = asyncio.create_task(_zmq_push(tx, n, size))
            report = await _zmq_pull(rx, n)
            await sender
        rx.close(linger=0)
        tx.close(linger=0)
    finally:
        ctx.term()
    return report


def zmq_server(ready: Any, results: Any, workload: str, messages: int, size: int,
               loop: str = "asyncio", count: bool = False, **_: Any) -> None:
    async def main() -> dict[str, Any]:
        work = _work(workload, count)
        import zmq
        import zmq.asyncio

        ctx = zmq.asyncio.Context()
        s = ctx.socket(zmq.REP if workload == "reqrep" else zmq.PULL)
        port = s.bind_to_random_port("tcp://127.0.0.1")
        ready.put(("127.0.0.1", port))
        n = _n(workload, messages)
        if work is not None:
            await s.send(await s.recv())  # the first: the connection's set-up
            work.start()
            await _zmq_rep(s, n - 1)
            report: dict[str, Any] = {"served": n, "work": work.report(n - 1)}
            await asyncio.sleep(0.2)
        else:
            report = await _zmq_pull(s, n)
        s.close(linger=1000)
        ctx.term()
        return report

    try:
        results.put({"side": "receiver", **_run(main(), loop)})
    except Exception as exc:
        results.put({"side": "receiver", "error": repr(exc)})


def zmq_client(address: Any, results: Any, workload: str, messages: int, size: int,
               loop: str = "asyncio", count: bool = False, **_: Any) -> None:
    async def main() -> dict[str, Any]:
        work = _work(workload, count)
        import zmq
        import zmq.asyncio

        ctx = zmq.asyncio.Context()
        s = ctx.socket(zmq.REQ if workload == "reqrep" else zmq.PUSH)
        s.connect(f"tcp://{address[0]}:{address[1]}")
        n = _n(workload, messages)
        if work is not None:
            report = await _zmq_req(s, n, size, work)
        else:
            await _zmq_push(s, n, size)
            report = {"sent": n}
        s.close(linger=30_000)
        ctx.term()
        return report

    try:
        results.put({"side": "sender", **_run(main(), loop)})
    except Exception as exc:
        results.put({"side": "sender", "error": repr(exc)})


# ------------------------------------------------------------------ running them

def _single(system: str, workload: str, messages: int, size: int, loop: str,
            results: Any, count: bool = False, busy_poll_s: float | None = None) -> None:
    try:
        job = (a3m_one_process(workload, messages, size, count, busy_poll_s)
               if system == "a3m.aio" else zmq_one_process(workload, messages, size, count))
        results.put(_run(job, loop))
    except Exception as exc:
        results.put({"error": repr(exc)})


def run_single(system: str, workload: str, messages: int, size: int, loop: str,
               cpus: set[int] | None, timeout: float = 300.0,
               count: bool = False, busy_poll_s: float | None = None) -> dict[str, Any]:
    """Both sides in one process (one event loop), spawned afresh."""
    ctx = mp.get_context("spawn")
    results: Any = ctx.Queue()
    proc = ctx.Process(target=_pinned, args=(_single, cpus, system, workload, messages, size,
                                             loop, results, count, busy_poll_s),
                       daemon=True)
    proc.start()
    try:
        report: dict[str, Any] = results.get(timeout=timeout)
    except queue.Empty as exc:
        raise WorkerFailed(f"{system} ({workload}, one process) timed out") from exc
    finally:
        proc.join(timeout=10)
        if proc.is_alive():
            proc.kill()
    if "error" in report:
        raise WorkerFailed(f"{system}: {report['error']}")
    return report


def measure(system: str, workload: str, messages: int, size: int, loop: str, processes: int,
            placement: str, count: bool = False, busy_poll_s: float | None = None
            ) -> dict[str, Any]:
    """One run: the figure of ``system`` on ``loop`` in one or two processes (REQ/REP: and
    its work per round trip, with ``count`` the Python calls and system calls too);
    ``busy_poll_s``: a3m.aio's nodes' (None: their default)."""
    if processes == 1:
        rep = run_single(system, workload, messages, size, loop, None, count=count,
                         busy_poll_s=busy_poll_s)
        rx = tx = rep
    else:
        server, client = ((a3m_server, a3m_client) if system == "a3m.aio"
                          else (zmq_server, zmq_client))
        params: dict[str, Any] = {"workload": workload, "messages": messages, "size": size,
                                  "loop": loop}
        if count:
            params["count"] = True
        if busy_poll_s is not None:  # (a3m.aio's nodes; pyzmq's sides take none)
            params["busy_poll_s"] = busy_poll_s
        rx, tx = run_pair(server, client, params, timeout=300, placement=placement)
    if workload == "reqrep":
        out = {k: tx[k] for k in ("p50_us", "p90_us", "p99_us", "round_trips")}
        # per round trip; one process: the client's figure is the whole process's
        out["work"] = ({"process": tx.get("work")} if processes == 1 else
                       {"client": tx.get("work"), "server": rx.get("work")})
    else:
        out = {"msgs_per_s": round(rx["msgs_per_s"], 1), "received": rx["received"]}
    if "rx_drops" in rx:
        out["rx_drops"] = rx["rx_drops"]
    return out


def run_aio_bench(workload: str, size: int, messages: int, progress: Progress,
                  placement: str = "spread", loops: tuple[str, ...] = ("asyncio",),
                  sets: int = 1, processes: tuple[int, ...] = (1, 2),
                  count: bool = False, busy_poll_s: float | None = None) -> dict[str, Any]:
    """``sets`` same-run sets of every (loop, processes, system); the medians per
    configuration, and a3m.aio against pyzmq.asyncio (p50 ratio, or throughput ratio).
    REQ/REP: each configuration's work per round trip too (``work``: per system, the median
    over the sets of both sides' sum; with ``count`` the Python calls and system calls as
    well, under a profiler and a tracepoint that slow the round trips); why a count is
    missing is said once."""
    from a3m.benchmarks.registry import machine

    t0 = time.perf_counter()
    loops = tuple(lp for lp in loops if lp == "asyncio" or installed(lp))
    systems = tuple(s for s in SYSTEMS if s == "a3m.aio" or installed("zmq"))
    metric = "p50_us" if workload == "reqrep" else "msgs_per_s"
    runs: list[dict[str, Any]] = []
    for i in range(sets):
        for loop in loops:
            for procs in processes:
                for system in systems:
                    progress(f"{workload} --asyncio set {i + 1}/{sets}: {system}, {loop}, "
                             f"{procs} process{'es' if procs > 1 else ''}")
                    row: dict[str, Any] = {"set": i, "system": system, "loop": loop,
                                           "processes": procs}
                    try:
                        row.update(measure(system, workload, messages, size, loop, procs,
                                           placement, count, busy_poll_s))
                    except WorkerFailed as exc:
                        row["error"] = str(exc)
                    runs.append(row)
    medians: list[dict[str, Any]] = []
    for loop in loops:
        for procs in processes:
            entry: dict[str, Any] = {"loop": loop, "processes": procs}
            for system in systems:
                vals = [r[metric] for r in runs if r["system"] == system and r["loop"] == loop
                        and r["processes"] == procs and metric in r]
                entry[system] = round(statistics.median(vals), 1) if vals else None
                if workload == "reqrep":
                    p99 = [r["p99_us"] for r in runs if r["system"] == system
                           and r["loop"] == loop and r["processes"] == procs and "p99_us" in r]
                    entry[f"{system} p99"] = round(statistics.median(p99), 1) if p99 else None
            # per set, then the median of the ratios (the sets are the same-run pairs)
            ratios = []
            for i in range(sets):
                pair = {r["system"]: r.get(metric) for r in runs if r["set"] == i
                        and r["loop"] == loop and r["processes"] == procs}
                a, z = pair.get("a3m.aio"), pair.get("pyzmq.asyncio")
                if a and z:
                    ratios.append(a / z)
            if ratios:
                entry["ratio"] = round(statistics.median(ratios), 3)
                entry["ratio_range"] = [round(min(ratios), 3), round(max(ratios), 3)]
            if workload == "reqrep":
                entry["work"] = {system: _median_work(
                    [r for r in runs if r["system"] == system and r["loop"] == loop
                     and r["processes"] == procs and "work" in r]) for system in systems}
            medians.append(entry)
    result: dict[str, Any] = {}
    for r in runs:
        hoist_why(result, list((r.get("work") or {}).values()))
    return {"workload": workload, "asyncio": True, "size": size, "messages": messages,
            "placement": placement, "sets": sets, "metric": metric, "counted": count,
            "busy_poll_s": busy_poll_s, **result,
            "ratio_means": ("a3m.aio p50 / pyzmq.asyncio p50 (below 1: a3m faster)"
                            if workload == "reqrep" else
                            "a3m.aio msg/s / pyzmq.asyncio msg/s (above 1: a3m faster)"),
            "medians": medians, "runs": runs,
            "elapsed_s": round(time.perf_counter() - t0, 2), "machine": machine()}


def _median_work(runs: list[dict[str, Any]]) -> dict[str, float | None]:
    """Per unit, the median over ``runs`` of each run's work per round trip, its sides
    added up (:func:`a3m.benchmarks.work.total`); None where no run has the figure."""
    totals = [total(r["work"]) for r in runs]
    out: dict[str, float | None] = {}
    for unit in UNITS:
        vals = [t[unit] for t in totals if t[unit] is not None]
        out[unit] = round(statistics.median(vals), 2) if vals else None
    return out


def plot(result: dict[str, Any], path: str) -> None:
    """Bars: the medians per configuration, a3m.aio beside pyzmq.asyncio."""
    from a3m.benchmarks.plot import require_matplotlib

    require_matplotlib()
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = result["medians"]
    labels = [f"{r['loop']}\n{r['processes']} process{'es' if r['processes'] > 1 else ''}"
              for r in rows]
    fig, ax = plt.subplots(figsize=(1.6 + 1.7 * len(rows), 4))
    width = 0.38
    for k, system in enumerate(SYSTEMS):
        vals = [r.get(system) or 0 for r in rows]
        xs = [i + (k - 0.5) * width for i in range(len(rows))]
        bars = ax.bar(xs, vals, width, label=system)
        ax.bar_label(bars, fmt="%.0f", fontsize=8)
    ax.set_xticks(range(len(rows)), labels)
    reqrep = result["workload"] == "reqrep"
    ax.set_ylabel("REQ/REP p50, us (lower is better)" if reqrep
                  else "PUSH/PULL msg/s (higher is better)")
    ax.set_title(f"a3m bench {result['workload']} --asyncio: {result['size']} B, median of "
                 f"{result['sets']} same-run set(s)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
