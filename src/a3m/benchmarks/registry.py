"""Workloads by name for ``a3m bench`` and ``a3m chaos``; later layers register theirs here."""

from __future__ import annotations

import os
import platform
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial, update_wrapper
from typing import Any

from a3m.benchmarks import peers
from a3m.benchmarks.procs import Side, WorkerFailed, run_pair
from a3m.benchmarks.work import hoist_why

Progress = Callable[[str], None]


@dataclass(frozen=True)
class Workload:
    """A sender/receiver pair of process entry points, and the peers it compares with."""

    name: str
    receiver: Side
    sender: Side
    metric: str = "msgs_per_s"  # or "latency" (p50_us / p99_us)
    baselines: tuple[tuple[str, str, Side, Side], ...] = ()  # (name, module, receiver, sender)


WORKLOADS: dict[str, Workload] = {}

THROUGHPUT_BASELINES = (
    ("raw_udp", "socket", peers.udp_receiver, peers.udp_sender),
    ("pyzmq", "zmq", peers.zmq_receiver, peers.zmq_sender),
    ("pynng", "pynng", peers.nng_receiver, peers.nng_sender),
)


#: The baseline that runs A3M itself with ``secure=False`` (the opt-out), same parameters.
INSECURE = "a3m_insecure"
#: With ``cookies``: the baseline that runs A3M the same way without them.
NO_COOKIES = "a3m_no_cookies"
#: reqrep: the Exon transport alone on the same runtime (no node layer), same parameters.
EXON = "a3m_exon"


def _opted_out(side: Side) -> Side:
    return update_wrapper(partial(side, secure=False), side)


def _insecure(receiver: Side, sender: Side) -> tuple[str, str, Side, Side]:
    return (INSECURE, "a3m", _opted_out(receiver), _opted_out(sender))


def register(workload: Workload) -> None:
    WORKLOADS[workload.name] = workload


def machine() -> dict[str, Any]:
    import a3m
    from a3m import _compiled
    from a3m.exon.engine import default_engine

    # compiled: the sans-I/O cores ran as mypyc's extensions (False: their Python sources),
    # profile_guided: built by tools/pgo_build.py (make's set-up); native: the native data
    # plane (a3m._native) ran, engine: which Exon engine.
    root = os.path.dirname(os.path.dirname(os.path.abspath(a3m.__file__)))
    return {"cpus": os.cpu_count(), "python": platform.python_version(),
            "platform": platform.platform(), "compiled": a3m.COMPILED,
            "profile_guided": a3m.COMPILED and _compiled.profile_guided(root),
            "native": a3m.NATIVE, "engine": default_engine()}


def run_bench(name: str, size: int, messages: int, progress: Progress = lambda _: None,
              baselines: bool = True, placement: str = "free", batch: int = 0,
              cookies: bool = False, count: bool = False,
              busy_poll_s: float | None = None) -> dict[str, Any]:
    """Measure one workload and, in the same run and placement, its baselines. ``batch``
    (pushpull): A3M sends and receives that many messages per call (send_many, recv_many);
    the baselines send one at a time as always. ``cookies`` (pushpull, reqrep): every A3M
    message carries a cookie, and A3M without cookies runs beside it as a baseline.
    Latency workloads report each side's work per round trip (:mod:`a3m.benchmarks.work`:
    CPU time, thread wake-ups, allocations; with ``count`` the Python calls and the system
    calls too, under a profiler and a tracepoint that slow every system's round trips); why
    a count is missing (``allocations_why``, ``syscalls_why``) is said once, at the top."""
    wl = WORKLOADS[name]
    params: dict[str, Any] = {"messages": messages, "size": size}
    if count:
        params["count"] = True
    if busy_poll_s is not None:  # (reqrep: A3M's nodes)
        params["busy_poll_s"] = busy_poll_s
    if batch:
        params["batch"] = batch
    if cookies:
        params["cookies"] = True
    t0 = time.perf_counter()
    progress(f"{name}: A3M, {messages} x {size} B, placement {placement}")
    rx, tx = run_pair(wl.receiver, wl.sender, params, placement=placement)
    result: dict[str, Any] = {"workload": name, "size": size, "messages": messages,
                              "placement": placement, "batch": batch, "cookies": cookies,
                              "busy_poll_s": busy_poll_s}
    if wl.metric == "latency":  # the client (sender role) measured the round trips
        result.update({k: tx[k] for k in ("p50_us", "p90_us", "p99_us", "max_us",
                                          "round_trips")})
        if "wrong_answers" in tx:  # (reqrep's client checks every answer)
            result["wrong_answers"] = tx["wrong_answers"]
        result["work"] = {"client": tx.get("work"), "server": rx.get("work")}
        hoist_why(result, list(result["work"].values()))
        result["counted"] = count
    else:
        result["msgs_per_s"] = round(rx["msgs_per_s"], 1)
        result["received"] = rx["received"]
    result["a3m"] = {"receiver": rx.get("stats"), "sender": tx.get("stats")}
    base: dict[str, Any] = {}
    compare = list(wl.baselines) if baselines else []
    if cookies:  # the same A3M run without cookies, first
        compare.insert(0, (NO_COOKIES, "a3m", wl.receiver, wl.sender))
    if compare:
        for bname, module, brx, btx in compare:
            if not peers.installed(module):
                continue
            if bname == "raw_udp" and size > 65507:
                base[bname] = {"skipped": "a payload above 65507 B does not fit one datagram"}
                continue
            n = messages if bname != "pynng" else min(messages, 50_000)  # NNG is ~20 k msg/s
            progress(f"{name}: baseline {bname}, {n} x {size} B")
            # A3M's own runs take A3M's parameters (its opt-out exactly, batch included; the
            # run without cookies and the transport alone all but the cookies); peers send one
            # at a time.
            if bname == INSECURE:
                bparams = dict(params)
            elif bname in (NO_COOKIES, EXON):
                bparams = {k: v for k, v in params.items() if k != "cookies"}
            else:
                bparams = {"messages": n, "size": size}
                if count:
                    bparams["count"] = True
            try:
                r, t = run_pair(brx, btx, bparams, placement=placement)
            except WorkerFailed as exc:
                base[bname] = {"error": str(exc)}
                continue
            if wl.metric == "latency":
                base[bname] = {k: t[k] for k in ("p50_us", "p99_us")}
                base[bname]["work"] = {"client": t.get("work"), "server": r.get("work")}
                hoist_why(result, list(base[bname]["work"].values()))
            else:
                entry: dict[str, Any] = {"msgs_per_s": round(r["msgs_per_s"], 1)}
                if "lost" in r:
                    entry["lost"] = r["lost"]
                base[bname] = entry
    result["baselines"] = base
    if wl.metric != "latency" and "raw_udp" in base and base["raw_udp"].get("msgs_per_s"):
        result["vs_raw_udp"] = round(result["msgs_per_s"] / base["raw_udp"]["msgs_per_s"], 3)
    if wl.metric == "latency" and base.get("pyzmq", {}).get("p50_us"):
        result["p50_vs_pyzmq"] = round(result["p50_us"] / base["pyzmq"]["p50_us"], 3)
    if wl.metric == "latency" and base.get(EXON, {}).get("p50_us"):
        # what the node layer (sockets, links, patterns) adds to the transport's round trip
        result["p50_over_exon_us"] = round(result["p50_us"] - base[EXON]["p50_us"], 1)
        if base.get("pyzmq", {}).get("p50_us"):
            result["exon_p50_vs_pyzmq"] = round(base[EXON]["p50_us"] / base["pyzmq"]["p50_us"],
                                                3)
    plain = base.get(NO_COOKIES, {})
    if wl.metric != "latency" and plain.get("msgs_per_s"):
        result["vs_no_cookies"] = round(result["msgs_per_s"] / plain["msgs_per_s"], 3)
    if wl.metric == "latency" and plain.get("p50_us"):
        result["p50_vs_no_cookies"] = round(result["p50_us"] / plain["p50_us"], 3)
    clear = base.get(INSECURE, {})
    if wl.metric != "latency" and clear.get("msgs_per_s"):
        result["vs_insecure"] = round(result["msgs_per_s"] / clear["msgs_per_s"], 3)
    if wl.metric == "latency" and clear.get("p50_us"):
        result["p50_vs_insecure"] = round(result["p50_us"] / clear["p50_us"], 3)
    result["elapsed_s"] = round(time.perf_counter() - t0, 2)
    result["machine"] = machine()
    return result


def _transport() -> None:
    from a3m.benchmarks import transport

    register(Workload("transport", transport.exon_receiver, transport.exon_sender,
                      baselines=(_insecure(transport.exon_receiver, transport.exon_sender),
                                 *THROUGHPUT_BASELINES)))


def _pushpull() -> None:
    from a3m.benchmarks import pushpull

    register(Workload("pushpull", pushpull.pull_receiver, pushpull.push_sender,
                      baselines=(_insecure(pushpull.pull_receiver, pushpull.push_sender),
                                 *THROUGHPUT_BASELINES)))


def _reqrep() -> None:
    from a3m.benchmarks import reqrep as rr

    register(Workload("reqrep", rr.a3m_server, rr.a3m_client, metric="latency", baselines=(
        _insecure(rr.a3m_server, rr.a3m_client),
        (EXON, "a3m", rr.exon_server, rr.exon_client),
        ("raw_udp", "socket", rr.udp_server, rr.udp_client),
        ("pyzmq", "zmq", rr.zmq_server, rr.zmq_client),
        ("pynng", "pynng", rr.nng_server, rr.nng_client))))


def _pubsub() -> None:
    from a3m.benchmarks import pubsub as ps

    register(Workload("pubsub", ps.a3m_sub, ps.a3m_pub, baselines=(
        ("raw_udp", "socket", peers.udp_receiver, peers.udp_sender),
        ("pyzmq", "zmq", ps.zmq_sub, ps.zmq_pub),
        ("pynng", "pynng", ps.nng_sub, ps.nng_pub))))


_transport()
_pushpull()
_reqrep()
_pubsub()
