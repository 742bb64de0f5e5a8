"""``a3m bench WORKLOAD``: throughput or latency, beside raw UDP, pyzmq and pynng.

Each workload is a subcommand with its own options (``a3m bench WORKLOAD --help`` lists
them); what every workload shares (``--json``, ``--out``, ``--plot``) is written once.
``--plot FILE.png`` also draws the result as a chart; ``a3m bench --plot FILE.png --from
a.json b.json`` draws saved results (``--out``) without measuring anything, one panel each.

``a3m bench rpc`` and ``a3m bench pushpull --loss/--delay/--rate`` run across an emulated
path (:mod:`a3m.testing.netem`: network namespaces, so root) instead of plain loopback.

``a3m bench reqrep|pushpull --asyncio`` measures ``a3m.aio`` beside ``pyzmq.asyncio`` in the
same run, both in one process and across two (:mod:`a3m.benchmarks.aio`).

``a3m bench pipeline`` runs one Spark streaming aggregation and sink fed by Spark's ``rate``
source and by the ``a3m`` source (:mod:`a3m.benchmarks.pipeline`). ``a3m bench groups`` sends
to groups of 1, 4 and 16 DISHes (ALL) beside a PUB with as many SUBs
(:mod:`a3m.benchmarks.groups`). ``a3m bench storm`` streams while another process floods the
receiver with garbage datagrams from 254 addresses (:mod:`a3m.benchmarks.storm`).
``a3m bench fanin --peers N`` links N producer nodes to one collector's PULL and reports
link-up time, the collector's quiet CPU, memory per peer, kernel drops, fan-in rate and
exactness beside pyzmq (:mod:`a3m.benchmarks.fanin`); ``a3m bench fanout --subs N`` the other
way: one PUB to N SUB nodes, link-up time, the publisher's memory per SUB, deliveries/s and
exactness beside pyzmq (:mod:`a3m.benchmarks.fanout`). Both take ``--paths native,python``
(A3M on each data plane, in the same run) and say in each A3M row which one ran.

Adding a workload is one entry in :data:`WORKLOADS`: its one-line help, the function that
runs it (``args -> exit status``) and its options, built from the option makers below
(:func:`size`, :func:`messages`, :func:`baselines`, :func:`placement`, or a function that
adds a group of its own). For example::

    "fanout": Workload("one PUB to N SUB nodes, beside pyzmq", _fanout,
                       (size(), messages(), baselines, placement, _fanout_options)),
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from importlib import import_module
from typing import Any

#: Adds some options to a workload's parser.
Options = Callable[[argparse.ArgumentParser], None]


@dataclass(frozen=True)
class Workload:
    """One ``a3m bench`` subcommand."""

    help: str  # one line, in ``a3m bench --help`` and atop ``a3m bench NAME --help``
    run: Callable[[argparse.Namespace], int]  # the measurement; returns the exit status
    options: tuple[Options, ...] = ()  # its options, beyond --json, --out (and --plot)
    plot: bool = True  # takes --plot FILE.png


# ------------------------------------------------------------------ options, one maker each

def size(default: int | None = 64, text: str = "payload bytes (default 64)") -> Options:
    def add(p: argparse.ArgumentParser) -> None:
        p.add_argument("--size", type=int, default=default, help=text)
    return add


def messages(default: int | None = 200_000,
             text: str = "messages (default 200000)") -> Options:
    def add(p: argparse.ArgumentParser) -> None:
        p.add_argument("--messages", type=int, default=default, help=text)
    return add


def baselines(p: argparse.ArgumentParser) -> None:
    p.add_argument("--no-baselines", action="store_true", help="measure A3M only")


def placement(p: argparse.ArgumentParser) -> None:
    p.add_argument("--placement", choices=("spread", "shared", "free"), default="spread",
                   help="where the two processes run, the same for every system: spread "
                        "(default: receiver on one CPU, sender on another, like two hosts), "
                        "shared (both on one CPU), free (the scheduler decides, which moves "
                        "a round trip's latency 2-3x between runs)")


def cookies(p: argparse.ArgumentParser) -> None:
    p.add_argument("--cookies", action="store_true",
                   help="every A3M message carries a cookie (its outcome is read by the "
                        "sender); A3M without cookies runs beside it")


def batch(p: argparse.ArgumentParser) -> None:
    p.add_argument("--batch", type=int, default=0, metavar="N",
                   help="A3M sends and receives N messages per call (send_many, recv_many); "
                        "the baselines still one at a time")


def asyncio_options(p: argparse.ArgumentParser) -> None:
    ap = p.add_argument_group("asyncio", "through a3m.aio beside pyzmq.asyncio, in one "
                              "process and across two")
    ap.add_argument("--asyncio", action="store_true",
                    help="measure a3m.aio against pyzmq.asyncio")
    ap.add_argument("--loops", default="asyncio",
                    help="event loops, one run each: asyncio, uvloop (default asyncio; "
                         "uvloop where installed)")
    ap.add_argument("--processes", default="1,2",
                    help="both sides in 1 process and/or across 2 (default 1,2)")
    ap.add_argument("--sets", type=int, default=1,
                    help="same-run sets of every configuration; medians reported (default 1)")


def path_options(rpc: bool) -> Options:
    """The emulated path's options: all of them for rpc, the path's own for pushpull."""
    def add(p: argparse.ArgumentParser) -> None:
        g = p.add_argument_group(
            "emulated path" + ("" if rpc else " (any of these: across it, not loopback)"),
            "server and client in two network namespaces joined by a user-space emulator "
            "(needs root); with no delay, jitter or rate, a loopback namespace whose nft "
            "rule drops packets, if nft is installed")
        g.add_argument("--loss", metavar="PCT[,PCT...]",
                       help="random loss per direction, percent; a list sweeps"
                            + (" (default 0)" if rpc else ""))
        g.add_argument("--delay", type=float, metavar="MS", help="one-way delay (default 0)")
        g.add_argument("--jitter", type=float, default=0.0, metavar="MS", help="delay jitter")
        g.add_argument("--rate", type=float, default=0.0, metavar="MBIT",
                       help="rate limit per direction (default none)")
        if rpc:
            g.add_argument("--concurrency", type=int, default=1, metavar="C",
                           help="requests in flight (A3M DEALER/ROUTER, pyzmq "
                                "DEALER/ROUTER, pynng REQ contexts)")
            g.add_argument("--duration", type=float, default=10.0, metavar="S",
                           help="seconds per system and loss rate (default 10)")
            g.add_argument("--order", choices=("both", "ordered", "unordered"),
                           default="both",
                           help="A3M's DEALER/ROUTER with per-link order off, on, or both one "
                                "after the other (default both: independent requests need "
                                "no order, and order holds replies behind a lost one)")
        g.add_argument("--loss-model", default="random",
                       metavar="MODEL" if rpc else "MODEL[,MODEL...]",
                       help="how the path loses --loss: random, burst (Gilbert-Elliott), data "
                            "(towards the server or receiver only), ack (back only), queue "
                            "(random plus a shallow queue at --rate), jitter (random plus "
                            "delay jitter that reorders)"
                            + (" (default random)" if rpc else
                               ", or all; a list runs each (default random)"))
        g.add_argument("--burst-len", type=float, default=3.0, metavar="PKTS",
                       help="burst model: mean packets a burst loses (default 3)")
        g.add_argument("--queue-ms", type=float, default=2.0, metavar="MS",
                       help="queue model: the rate limit's queue, in ms of transmission "
                            "(default 2)")
    return add


def bulk_options(p: argparse.ArgumentParser) -> None:
    bp = p.add_argument_group("veth pair", "two network namespaces joined by a veth pair "
                              "(a real kernel path; needs root)")
    bp.add_argument("--mtu", type=int, default=1500, help="the veth pair's MTU (default 1500)")
    bp.add_argument("--paths", default="native",
                    help="bulk: A3M's data planes, one run each: native (a3m._native, where "
                         "built), python (its Python twins, A3M_NATIVE=0), or both "
                         "(native,python)")
    bp.add_argument("--offload", choices=("off", "on", "both"), default="off",
                    help="A3M with UDP segmentation offload (GSO sends, GRO reads, where the "
                         "kernel has them; A3M_UDP_OFFLOAD=on) off (default, as A3M ships), "
                         "on, or both one after the other")


def groups_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--members", default="1,4,16",
                   help="group sizes, one run each (default 1,4,16)")


def storm_options(p: argparse.ArgumentParser) -> None:
    st = p.add_argument_group("storm")
    st.add_argument("--storm-rates", default="2000,20000,50000",
                    help="garbage datagrams per second, one set of runs each "
                         "(default 2000,20000,50000)")
    st.add_argument("--mixes", default="random,hello,initiate,sealed,mixed",
                    help="what the attacker sends, one run each (default: all five)")
    st.add_argument("--no-elsewhere", action="store_true",
                    help="skip the runs with the storm aimed at another port of the host")


def fanin_options(p: argparse.ArgumentParser) -> None:
    fa = p.add_argument_group("fan-in")
    fa.add_argument("--peers", default="1000",
                    help="producers, one run each (default 1000; e.g. 100,1000,4000: --plot "
                         "then draws each figure against the number)")
    fa.add_argument("--quiet-s", type=float, default=10.0,
                    help="seconds the collector's CPU is measured with every link quiet "
                         "(default 10)")
    fa.add_argument("--per-process", type=int, default=500,
                    help="producer nodes per process (asyncio; default 500)")
    fa.add_argument("--sources", type=int, default=1,
                    help="loopback addresses the producers bind to (default 1: all on "
                         "127.0.0.1, as a fleet behind one address)")
    fa.add_argument("--node-option", action="append", default=[], metavar="NAME=VALUE",
                    help="an Exon option for every A3M node of the run (e.g. "
                         "rto_initial_s=1.0); repeatable")
    fa.add_argument("--socket-option", action="append", default=[], metavar="NAME=VALUE",
                    help="a socket option for every A3M PUSH and PULL of the run (e.g. "
                         "idle_probe_s=10, to measure the idle probes' cost within the "
                         "quiet phase); repeatable")
    fa.add_argument("--timeout", type=float, default=120.0,
                    help="seconds a phase may take before it reports what it saw "
                         "(default 120)")
    paths(fa)


def paths(p: Any) -> None:
    p.add_argument("--paths", default="native",
                   help="A3M's data planes, one run each: native (a3m._native, where built), "
                        "python (its Python twins, A3M_NATIVE=0), or both (native,python); "
                        "each A3M row says which ran (path) and its UDP offload")


def fanout_options(p: argparse.ArgumentParser) -> None:
    fo = p.add_argument_group("fan-out")
    fo.add_argument("--subs", default="1000",
                    help="SUB nodes, one run each (default 1000; e.g. 100,1000: --plot then "
                         "draws each figure against the number)")
    fo.add_argument("--per-process", type=int, default=250,
                    help="SUB nodes per process (asyncio; default 250)")
    fo.add_argument("--timeout", type=float, default=120.0,
                    help="seconds a phase may take before it reports what it saw "
                         "(default 120)")
    paths(fo)


def pipeline_options(p: argparse.ArgumentParser) -> None:
    sp = p.add_argument_group("pipeline")
    sp.add_argument("--readings", type=int, default=200_000,
                    help="readings per a3m run (default 200000)")
    sp.add_argument("--producers", type=int, default=4, help="producer nodes (default 4)")
    sp.add_argument("--producer-processes", type=int, default=1,
                    help="processes the producer nodes are spread over (default 1)")
    sp.add_argument("--partitions", default="1,2,4",
                    help="a3m source partitions, one run each (default 1,2,4)")
    sp.add_argument("--rate-rows", type=int, default=200_000,
                    help="rows per micro-batch of Spark's rate-micro-batch source "
                         "(default 200000)")
    sp.add_argument("--rate-seconds", type=float, default=15.0,
                    help="seconds the rate feed is measured (default 15; on, if need be, until "
                         "two batches have finished after the warm-up)")
    sp.add_argument("--master", default="local[2]", help="Spark master (default local[2])")


def _output(p: argparse.ArgumentParser, plot: bool, top: bool) -> None:
    """--json, --out, --plot (and --from): on ``a3m bench`` itself (``top``) with their
    defaults, and on each workload with none, so that they may stand on either side of the
    workload's name without one parser resetting what the other read."""
    keep = {} if top else {"default": argparse.SUPPRESS}
    g = p.add_argument_group("output")
    g.add_argument("--json", action="store_true", help="print one JSON object on stdout",
                   **keep)
    g.add_argument("--out", metavar="FILE.json", help="also write the JSON result to this file",
                   **keep)
    if plot or top:
        g.add_argument("--plot", metavar="FILE.png",
                       help="draw a chart of the result (a3m beside its baselines) to this "
                            "file (.png, .svg or .pdf; needs matplotlib)", **keep)
    g.add_argument("--from", dest="from_files", nargs="+", metavar="RESULT.json",
                   help=("with --plot: draw these saved results (from --out), one panel "
                         "each, instead of running a workload") if top else argparse.SUPPRESS,
                   **keep)


# ------------------------------------------------------------------------------- the table

def _workloads() -> dict[str, Workload]:
    loopback = (baselines, placement)
    return {
        "transport": Workload(
            "the transport alone (a3m.exon Endpoints, no sockets): a one-way stream "
            "between two processes", _loopback, (size(), messages(), *loopback)),
        "pushpull": Workload(
            "PUSH -> PULL between two processes (loopback, or an emulated path with "
            "--loss/--delay/--rate)", _pushpull,
            (size(), messages(), *loopback, batch, cookies, asyncio_options,
             path_options(rpc=False))),
        "reqrep": Workload(
            "REQ/REP round trips between two processes: p50 and p99 latency", _reqrep,
            (size(), messages(), *loopback, cookies, work_count, asyncio_options)),
        "pubsub": Workload(
            "PUB -> one SUB between two processes", _loopback,
            (size(), messages(), *loopback)),
        "rpc": Workload(
            "DEALER/ROUTER requests across an emulated lossy path (root): round trips/s "
            "and latency, ordered and unordered", _emulated,
            (size(), path_options(rpc=True))),
        "bulk": Workload(
            "PUSH -> PULL across a veth pair at a real MTU (root): MB/s and msg/s of A3M "
            "secure and plain, pyzmq, raw UDP", _bulk,
            (size(None, "payload bytes (default: 64, 1024, 65536 and 1048576, one run each)"),
             messages(None, "messages (default: each size's own)"), baselines,
             bulk_options)),
        "fanin": Workload(
            "N producer nodes into one collector's PULL, beside pyzmq: link-up, quiet CPU, "
            "memory per peer, rate", _fanin,
            (size(), messages(None, "messages per producer (default 200000 / peers, at "
                                    "least 20)"), *loopback, fanin_options)),
        "fanout": Workload(
            "one PUB to N SUB nodes, beside pyzmq: link-up, the publisher's memory per SUB, "
            "deliveries/s, exactness", _fanout,
            (size(), messages(1000, "messages the PUB sends, each to every SUB (default "
                                    "1000)"), *loopback, fanout_options)),
        "groups": Workload(
            "RADIO -> groups of DISHes (ALL) beside PUB -> as many SUBs", _groups,
            (size(), messages(20_000, "messages per run (default 20000)"),
             groups_options)),
        "storm": Workload(
            "a secure stream while another process floods the receiver with garbage "
            "datagrams", _storm,
            (size(), messages(100_000, "messages per run (default 100000)"), placement,
             storm_options), plot=False),
        "pipeline": Workload(
            "one Spark streaming query fed by Spark's rate source and by the a3m source",
            _pipeline, (pipeline_options,)),
        "soak": Workload(
            "a long run across two processes and the lossy relay (streams, round trips, "
            "link churn, receiver restarts): memory, descriptors, threads, exactness",
            lambda args: import_module("a3m.benchmarks.soak").cli(args),
            (lambda p: import_module("a3m.benchmarks.soak").add_options(p),)),
    }


def add_arguments(p: argparse.ArgumentParser) -> None:
    _output(p, plot=True, top=True)
    sub = p.add_subparsers(dest="workload", metavar="WORKLOAD",
                           title="workloads (a3m bench WORKLOAD --help: its options)")
    for name, w in WORKLOADS.items():
        wp = sub.add_parser(name, help=w.help, description=w.help)
        for add in w.options:
            add(wp)
        _output(wp, plot=w.plot, top=False)


def _error(msg: str) -> int:
    print(f"a3m bench: {msg}", file=sys.stderr)
    return 2


def _progress(msg: str) -> None:
    print(f"[bench] {msg}", file=sys.stderr, flush=True)


def _counts(text: str) -> tuple[int, ...] | None:
    """``"1,4,16"`` -> (1, 4, 16); None unless it is counts >= 1 separated by commas."""
    try:
        counts = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        return None
    return counts if counts and min(counts) >= 1 else None


def _save(result: dict[str, Any], args: argparse.Namespace, plot: str | None,
          draw: Any) -> str:
    """Write the measurement (``--out``: data only, so ``--from`` can draw it again) and its
    chart (``--plot``, drawn by ``draw``); returns the JSON to print (with ``plot``)."""
    indent = None if args.json else 2
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            f.write(json.dumps(result, indent=indent) + "\n")
    if plot:
        draw(result, plot)
        _progress(f"chart written to {plot}")
        result["plot"] = plot
    return json.dumps(result, indent=indent)


def _plot_refused(plot: str) -> int | None:
    """An error exit if ``plot`` cannot be written or drawn (checked before the measurement,
    not after it), else None."""
    from a3m.benchmarks.plot import PlotError, check_output, require_matplotlib

    try:
        check_output(plot)
        require_matplotlib()
    except PlotError as exc:
        return _error(str(exc))
    return None


def run(args: argparse.Namespace) -> int:
    for name, default in (("json", False), ("out", None), ("plot", None), ("from_files", None)):
        if not hasattr(args, name):
            setattr(args, name, default)
    if args.from_files:
        return _plot_saved(args, args.from_files, args.plot)
    if args.workload is None:
        return _error("give a WORKLOAD (" + ", ".join(WORKLOADS) + "), or "
                      "--plot FILE.png --from RESULT.json ... to chart saved results")
    if args.plot and (refused := _plot_refused(args.plot)) is not None:
        return refused
    return WORKLOADS[args.workload].run(args)


# ------------------------------------------------------------------------------ workloads

def _pushpull(args: argparse.Namespace) -> int:
    if args.asyncio:
        return _asyncio(args)
    if (args.loss is not None or args.delay is not None or args.rate
            or args.loss_model != "random"):
        return _emulated(args)
    return _loopback(args)


def work_count(p: argparse.ArgumentParser) -> None:
    p.add_argument("--count", action="store_true",
                   help="also count each side's Python calls and system calls per round "
                        "trip (every system, --asyncio too; under a profiler and perf: the "
                        "latencies of such a run are not comparable)")
    p.add_argument("--busy-poll-s", type=float, default=None, metavar="S",
                   help="A3M's nodes' busy_poll_s (default: the node's default; 0: no busy "
                        "poll)")


def _reqrep(args: argparse.Namespace) -> int:
    return _asyncio(args) if args.asyncio else _loopback(args)


def _loopback(args: argparse.Namespace) -> int:
    """transport, pushpull, reqrep, pubsub on loopback: A3M beside its baselines."""
    from a3m.benchmarks.registry import WORKLOADS as RUNNABLE
    from a3m.benchmarks.registry import run_bench

    if args.workload not in RUNNABLE:
        return _error(f"workload {args.workload!r} is not available yet")
    if args.size < 8 or args.messages < 2:
        return _error("need --size >= 8 and --messages >= 2")
    batch_n = getattr(args, "batch", 0)
    with_cookies = getattr(args, "cookies", False)
    if batch_n < 0:
        return _error("--batch must be >= 1")
    if with_cookies and batch_n:
        return _error("--cookies applies to pushpull (without --batch) and reqrep")
    result = run_bench(args.workload, args.size, args.messages, _progress,
                       baselines=not args.no_baselines, placement=args.placement,
                       batch=batch_n, cookies=with_cookies,
                       count=getattr(args, "count", False),
                       busy_poll_s=getattr(args, "busy_poll_s", None))
    from a3m.benchmarks.plot import plot_result

    text = _save(result, args, args.plot, plot_result)
    if args.json:
        print(text)
    else:
        _table(result)
    return 0


def _bulk(args: argparse.Namespace) -> int:
    """PUSH/PULL over a veth pair at ``--mtu``: A3M secure and plain, pyzmq, raw UDP."""
    from a3m.benchmarks import bulk
    from a3m.testing.netem import NetemUnavailable

    sizes = bulk.SIZES if args.size is None else (args.size,)
    if min(sizes) < 8 or not 576 <= args.mtu <= 65535:
        return _error("need --size >= 8 and --mtu within 576..65535")
    count = args.messages  # None: each size's own default
    if count is not None and count < 2:
        return _error("need --messages >= 2")
    try:
        systems = bulk.available(args.offload, args.paths)
        if args.no_baselines:
            systems = [s for s in systems if s.startswith("a3m")]
        result = bulk.run_bulk(sizes, args.mtu, systems, count, progress=_progress)
    except NetemUnavailable as exc:
        return _error(f"bulk needs a veth pair between two network namespaces: {exc}")
    text = _save(result, args, args.plot, bulk.plot)
    if args.json:
        print(text)
    else:
        from rich.console import Console
        from rich.table import Table

        table = Table(title=f"a3m bench bulk (veth, MTU {result['mtu']})")
        for col in ("system", "size", "msgs", "MB/s", "msg/s", "exact", "dgrams out",
                    "retx", "REQSLOTS", "slot stalls", "dgrams in", "kernel drops",
                    "GSO sends/GRO reads", "cpu s tx/rx"):
            table.add_column(col, justify="right")
        for r in result["results"]:
            snd = r.get("sender", {})
            if "error" in r:
                table.add_row(r["system"], str(r["size"]), str(r["messages"]), r["error"])
                continue
            table.add_row(r["system"], str(r["size"]), str(r["messages"]),
                          f"{r.get('mb_per_s', 0):,.1f}", f"{r.get('msgs_per_s', 0):,}",
                          str(r.get("exact", "-")), str(snd.get("datagrams_out", "-")),
                          str(snd.get("retransmits", "-")), str(snd.get("reqslots_sent", "-")),
                          str(snd.get("slot_stalls", "-")), str(r.get("datagrams_in", "-")),
                          str(r.get("kernel_rcvbuf_drops", "-")),
                          f"{snd.get('gso_sends', '-')}/{r.get('gro_reads', '-')}",
                          f"{snd.get('cpu_s', '-')}/{r.get('cpu_s', '-')}")
        Console(stderr=True, width=200).print(table)
        print(json.dumps(result["ratios"]), file=sys.stderr)
    bad = [r for r in result["results"]
           if "error" in r or (r["system"] != "udp" and not r.get("exact"))]
    return 1 if bad else 0


def _asyncio(args: argparse.Namespace) -> int:
    """reqrep or pushpull through a3m.aio beside pyzmq.asyncio (``--asyncio``)."""
    from a3m.benchmarks import aio

    if args.workload not in ("reqrep", "pushpull"):
        return _error("--asyncio measures reqrep or pushpull")
    loops = tuple(x.strip() for x in args.loops.split(",") if x.strip())
    if not loops or any(x not in aio.LOOPS for x in loops):
        return _error(f"--loops takes {', '.join(aio.LOOPS)} separated by commas")
    procs = _counts(args.processes)
    if procs is None or any(n not in (1, 2) for n in procs):
        return _error("--processes takes 1 and/or 2")
    if args.sets < 1 or args.size < 8 or args.messages < 2:
        return _error("need --sets >= 1, --size >= 8 and --messages >= 2")
    result = aio.run_aio_bench(args.workload, args.size, args.messages, _progress,
                               placement=args.placement, loops=loops, sets=args.sets,
                               processes=procs, count=getattr(args, "count", False),
                               busy_poll_s=getattr(args, "busy_poll_s", None))
    text = _save(result, args, args.plot, aio.plot)
    if args.json:
        print(text)
    else:
        from rich.console import Console
        from rich.table import Table

        metric = result["metric"]
        table = Table(title=f"a3m bench {args.workload} --asyncio ({args.size} B, median of "
                            f"{args.sets} set(s), {metric})")
        for col in ("loop", "processes", *aio.SYSTEMS, "ratio (per-set range)"):
            table.add_column(col, justify="right")
        for row in result["medians"]:
            rng = row.get("ratio_range")
            table.add_row(row["loop"], str(row["processes"]),
                          *(f"{row[s]:,.1f}" if row.get(s) else "-" for s in aio.SYSTEMS),
                          f"{row['ratio']} ({rng[0]}-{rng[1]})" if rng else "-")
        Console(stderr=True).print(table)
        print(result["ratio_means"], file=sys.stderr)
        if args.workload == "reqrep":
            work = Table(title="work (median of the sets)", caption=WORK_CAPTION)
            shown = work_units([r.get("work") for r in result["runs"]])
            for col in ("loop", "procs", "system", *(WORK_COLUMNS[u] for u in shown)):
                work.add_column(col, justify="right")
            for row in result["medians"]:
                for system, units in row.get("work", {}).items():
                    work.add_row(row["loop"], str(row["processes"]), system,
                                 *work_cells({"all": units}, shown))
            wide_console().print(work)
            _why(result)
    return 0 if all(r.get("ratio") for r in result["medians"]) else 1


def _pipeline(args: argparse.Namespace) -> int:
    """The Spark pipeline fed by rate and by a3m (1, 2, 4 partitions), in one run."""
    from a3m.benchmarks import pipeline

    parts = _counts(args.partitions)
    if parts is None:
        return _error(f"--partitions takes counts >= 1 separated by commas, not "
                      f"{args.partitions!r}")
    if args.readings < args.producers or args.producers < 1:
        return _error("need --producers >= 1 and --readings >= producers")

    if not 1 <= args.producer_processes <= args.producers:
        return _error("--producer-processes is 1 to --producers")
    result = pipeline.run_pipeline(args.readings, args.producers, parts, args.rate_rows,
                                   args.rate_seconds, master=args.master, progress=_progress,
                                   processes=args.producer_processes)
    text = _save(result, args, args.plot, pipeline.plot)
    if args.json:
        print(text)
    else:
        from rich.console import Console
        from rich.table import Table

        table = Table(title=f"a3m bench pipeline ({result['master']})")
        for col in ("feed", "partitions", "readings", "seconds", "readings/s", "exact"):
            table.add_column(col, justify="right")
        r = result["rate"]
        table.add_row("rate", "-", f"{r['readings']:,}", str(r["seconds"]),
                      f"{r['readings_per_s']:,}", "-")
        for r in result["a3m"]:
            table.add_row("a3m", str(r["partitions"]), f"{r['readings']:,}",
                          str(r["end_to_end_s"]), f"{r['readings_per_s']:,}", str(r["exact"]))
        Console(stderr=True).print(table)
        print(f"a3m (best) / rate: {result['a3m_over_rate']}", file=sys.stderr)
    return 0 if result["exact"] else 1


def _groups(args: argparse.Namespace) -> int:
    """RADIO/DISH ALL to 1, 4, 16 members beside PUB/SUB, in one run."""
    from a3m.benchmarks import groups

    sizes = _counts(args.members)
    if sizes is None:
        return _error(f"--members takes counts >= 1 separated by commas, not {args.members!r}")

    result = groups.run_groups(args.messages, max(4, args.size), sizes, _progress)
    text = _save(result, args, args.plot, groups.plot)
    print(text if args.json else
          "\n".join(f"{r['kind']:15} {r['members']:3} members: "
                    f"{r['msgs_per_s_per_member']:>8,} msg/s per member, exact={r['exact']}"
                    for r in result["runs"]))
    return 0 if result["exact"] else 1


def _storm(args: argparse.Namespace) -> int:
    """A secure stream under 2 k, 20 k, 50 k garbage datagrams a second, each mix."""
    from a3m.benchmarks import storm

    rates = _counts(args.storm_rates)
    mixes = [m.strip() for m in args.mixes.split(",") if m.strip()]
    if rates is None:
        return _error(f"--storm-rates takes rates >= 1 separated by commas, not "
                      f"{args.storm_rates!r}")
    if not mixes or set(mixes) - set(storm.MIXES):
        return _error(f"--mixes takes some of {','.join(storm.MIXES)}")
    if args.size < 8 or args.messages < 2:
        return _error("need --size >= 8 and --messages >= 2")
    result = storm.run_storm(args.messages, args.size, [float(r) for r in rates], mixes,
                             elsewhere=not args.no_elsewhere, placement=args.placement,
                             progress=_progress)
    text = _save(result, args, None, None)
    if args.json:
        print(text)
    else:
        q = result["quiet"]
        print(f"quiet: {q['msgs_per_s']:,} msg/s on average (each storm run is compared "
              f"with the quiet run right before it), exact={q['exact']}", file=sys.stderr)
        for r in result["runs"]:
            where = " (another port)" if r["elsewhere"] else ""
            print(f"{r['rate_asked']:>7,.0f}/s {r['mix']:<8}{where:<15} "
                  f"{r['msgs_per_s']:>8,} msg/s = {r['share_of_quiet']:.2f} of quiet "
                  f"({r['quiet_msgs_per_s']:,}), by CPU {r['cpu_share_of_quiet']:.2f}, "
                  f"exact={r['exact']}, +{r['rss_growth_mib']} MiB, "
                  f"reflection {r.get('reflection', 0):.3f}", file=sys.stderr)
    return 0 if result["exact"] else 1


def _fanin(args: argparse.Namespace) -> int:
    """N producers into one collector, A3M and pyzmq, for each N given."""
    from a3m.benchmarks import fanin

    counts = _counts(args.peers)
    if counts is None:
        return _error(f"--peers takes counts >= 1 separated by commas, not {args.peers!r}")
    if args.size < 8 or args.quiet_s <= 0 or args.per_process < 1 or args.sources < 1 \
            or args.timeout <= 0:
        return _error("need --size >= 8, --quiet-s > 0, --per-process >= 1, --sources >= 1 "
                      "and --timeout > 0")
    per_producer = args.messages  # None: by the number of peers
    import os

    for flag, items, env in (("--node-option", args.node_option, "A3M_FANIN_NODE_OPTIONS"),
                             ("--socket-option", args.socket_option,
                              "A3M_FANIN_SOCKET_OPTIONS")):
        options: dict[str, Any] = {}
        for item in items:
            name, sep, value = item.partition("=")
            try:
                options[name.strip()] = json.loads(value)
            except ValueError:
                options[name.strip()] = value
            if not sep:
                return _error(f"{flag} takes NAME=VALUE, not {item!r}")
        if options:
            os.environ[env] = json.dumps(options)  # (the processes read it)
    try:
        fanin.a3m_systems(args.paths)
    except ValueError as exc:
        return _error(f"--paths: {exc}")
    result = fanin.run_fanin(counts, per_producer, args.size, args.quiet_s, args.timeout,
                             args.per_process, args.sources, args.placement,
                             baselines=not args.no_baselines, progress=_progress,
                             paths=args.paths)
    text = _save(result, args, args.plot, fanin.plot)
    if args.json:
        print(text)
    else:
        from rich.console import Console
        from rich.table import Table

        table = Table(title=f"a3m bench fanin ({args.size} B, placement {args.placement})")
        cols = ("system", "path", "peers", "link s", "quiet CPU %", "KiB/peer", "rx drops",
                "msg/s", "CPU us/msg", "sent", "lost", "dups", "exact")
        for col in cols:
            table.add_column(col, justify="right")
        for r in result["runs"]:
            table.add_row(r["system"], _path_cell(r), str(r["peers"]), str(r.get("link_s")),
                          str(r.get("idle_cpu_pct")), str(r.get("kib_per_peer")),
                          str(r.get("rx_drops")), str(r.get("msgs_per_s")),
                          str(r.get("busy_cpu_us_per_msg")),
                          str(r.get("sent")), str(r.get("lost")), str(r.get("duplicates")),
                          str(r.get("exact")) + (f" ({r['error']})" if "error" in r else ""))
        Console(stderr=True, width=200).print(table)
    return 0 if result["all_exact"] else 1


def _path_cell(row: dict[str, Any]) -> str:
    """An A3M row's data plane and offload for a table: ``native gso``, ``python``, ``-``."""
    if not row.get("path"):
        return "-"
    off = row.get("offload") or {}
    return " ".join([row["path"], *(k for k in ("gso", "gro") if off.get(k))])


def _fanout(args: argparse.Namespace) -> int:
    """One PUB to N SUBs, A3M and pyzmq, for each N given."""
    from a3m.benchmarks import fanin, fanout

    counts = _counts(args.subs)
    if counts is None:
        return _error(f"--subs takes counts >= 1 separated by commas, not {args.subs!r}")
    if args.size < 4 or args.messages < 1 or args.per_process < 1 or args.timeout <= 0:
        return _error("need --size >= 4, --messages >= 1, --per-process >= 1 and "
                      "--timeout > 0")
    try:
        fanin.a3m_systems(args.paths)
    except ValueError as exc:
        return _error(f"--paths: {exc}")
    result = fanout.run_fanout(counts, args.messages, args.size, args.timeout,
                               args.per_process, args.placement,
                               baselines=not args.no_baselines, paths=args.paths,
                               progress=_progress)
    text = _save(result, args, args.plot, fanout.plot)
    if args.json:
        print(text)
    else:
        from rich.console import Console
        from rich.table import Table

        table = Table(title=f"a3m bench fanout ({args.messages} x {args.size} B, placement "
                            f"{args.placement})")
        cols = ("system", "path", "SUBs", "link s", "KiB/SUB", "deliveries/s",
                "pub CPU us/delivery", "sent", "delivered", "missing", "dups", "exact")
        for col in cols:
            table.add_column(col, justify="right")
        for r in result["runs"]:
            table.add_row(r["system"], _path_cell(r), str(r["subs"]), str(r.get("link_s")),
                          str(r.get("kib_per_sub")), str(r.get("deliveries_per_s")),
                          str(r.get("pub_cpu_us_per_delivery")), str(r.get("sent")),
                          str(r.get("delivered")), str(r.get("missing")),
                          str(r.get("duplicates")),
                          str(r.get("exact")) + (f" ({r['error']})" if "error" in r else ""))
        Console(stderr=True, width=200).print(table)
    return 0 if result["all_exact"] else 1


def _emulated(args: argparse.Namespace) -> int:
    """rpc, or pushpull, across an emulated path."""
    from a3m.benchmarks import emulated
    from a3m.testing.netem import NetemUnavailable

    try:
        losses = [float(x) for x in (args.loss or "0").split(",") if x.strip()]
    except ValueError:
        return _error(f"--loss takes percentages separated by commas, not {args.loss!r}")
    if not losses or any(not 0 <= x < 100 for x in losses):
        return _error("--loss percentages must be within 0..100")
    concurrency = getattr(args, "concurrency", 1)  # (rpc's options)
    duration = getattr(args, "duration", 10.0)
    if concurrency < 1 or duration <= 0 or args.size < 16:
        return _error("need --concurrency >= 1, --duration > 0 and --size >= 16")
    from a3m.testing.netem import MODELS

    models = tuple(MODELS if args.loss_model.strip() == "all" else
                   (m.strip() for m in args.loss_model.split(",") if m.strip()))
    if not models or any(m not in MODELS for m in models):
        return _error(f"--loss-model takes {', '.join(MODELS)} or all, separated by commas, "
                      f"not {args.loss_model!r}")
    if args.workload == "rpc" and len(models) != 1:
        return _error("rpc takes one --loss-model a run")
    if args.burst_len < 1 or args.queue_ms <= 0:
        return _error("need --burst-len >= 1 and --queue-ms > 0")
    orders = {"both": (False, True), "ordered": (True,), "unordered": (False,)}[getattr(args, "order", "both")]

    try:
        if args.workload == "rpc":
            result = emulated.run_rpc(losses, delay_ms=args.delay or 0.0, jitter_ms=args.jitter,
                                      rate_mbit=args.rate, concurrency=concurrency,
                                      duration=duration, size=args.size,
                                      orders=orders, model=models[0], progress=_progress)
        else:
            result = emulated.run_stream(losses, delay_ms=args.delay or 0.0,
                                         rate_mbit=args.rate, messages=args.messages,
                                         size=args.size, models=models,
                                         jitter_ms=args.jitter, burst_len=args.burst_len,
                                         queue_ms=args.queue_ms, progress=_progress)
    except NetemUnavailable as exc:
        return _error(f"{args.workload} over an emulated path: {exc}")
    text = _save(result, args, args.plot, emulated.plot)
    if args.json:
        print(text)
    else:
        _emulated_table(result)
    return 0


def _emulated_table(result: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    rpc = result["workload"] == "rpc"
    model = result.get("model") or ",".join(result.get("models", ["random"]))
    table = Table(title=f"a3m bench {result['workload']} (delay {result['delay_ms']} ms"
                        f"{', x' + str(result['concurrency']) if rpc else ''}, {model} loss)")
    cols: tuple[str, ...] = ("system", "loss %")
    cols += (("rt/s", "p50 ms", "p99 ms", "max ms") if rpc else
             ("model", "msg/s", "of clean", "of model at 0", "retransmits", "probe timeouts",
              "congestion events", "duplicates", "path lost"))
    for col in cols:
        table.add_column(col, justify="right")
    for r in result["results"]:
        name = r["system"] + ("" if "ordered" not in r else
                              " ordered" if r["ordered"] else " unordered")
        if "error" in r:
            table.add_row(name, str(r["loss_pct"]), r["error"])
        elif rpc:
            table.add_row(name, str(r["loss_pct"]), f"{r['rt_per_s']:,.1f}",
                          str(r["p50_ms"]), str(r["p99_ms"]), str(r["max_ms"]))
        else:
            snd, ps = r.get("sender", {}), r.get("path_stats", {})
            lost = sum(d.get(k, 0) for d in ps.values() if isinstance(d, dict)
                       for k in ("lost", "burst_lost", "queue_drops"))
            table.add_row(name, str(r["loss_pct"]), r.get("model", "random"),
                          f"{r.get('msgs_per_s', 0):,}", str(r.get("of_clean", "")),
                          str(r.get("of_model_at_0", "")), str(snd.get("retransmits", "")),
                          str(snd.get("probe_timeouts", "")),
                          str(snd.get("congestion_events", "")),
                          str(r.get("duplicates", "")), str(lost or ps.get("dropped", "")))
    Console(stderr=True).print(table)


def _plot_saved(args: argparse.Namespace, files: list[str], plot: str | None) -> int:
    if not plot:
        return _error("--from needs --plot FILE.png (the chart to draw)")
    if args.workload is not None:
        return _error(f"give either a WORKLOAD ({args.workload}) to measure or --from saved "
                      "results to chart, not both")
    if args.out:
        return _error("--out writes a new measurement; with --from nothing is measured")
    from a3m.benchmarks.plot import PlotError, check_output, load_results, plot_results

    try:
        check_output(plot)
        results = load_results(files)
        plot_results(results, plot)
    except PlotError as exc:
        return _error(str(exc))
    print(f"[bench] chart of {len(results)} result(s) written to {plot}", file=sys.stderr)
    if args.json:
        print(json.dumps({"plot": plot, "from": list(files)}))
    return 0


def _table(result: dict[str, Any]) -> None:
    from rich.table import Table

    table = Table(title=f"a3m bench {result['workload']} ({result['size']} B, "
                        f"placement {result.get('placement', 'free')})")
    table.add_column("system")
    metric = "p50_us" if "p50_us" in result else "msgs_per_s"
    table.add_column(metric, justify="right")
    rows = [result, *result["baselines"].values()]
    # per round trip, client + server (a3m.benchmarks.work); a unit no row has, left out
    units = work_units([row.get("work") for row in rows]) if "work" in result else []
    if units:
        table.caption = WORK_CAPTION
    for unit in units:
        table.add_column(WORK_COLUMNS[unit], justify="right")

    def cells(row: dict[str, Any]) -> list[str]:
        return work_cells(row.get("work"), units)

    table.add_row("a3m", f"{result[metric]:,.0f}", *cells(result))
    for name, row in result["baselines"].items():
        value = row.get(metric)
        table.add_row(name, f"{value:,.0f}" if value is not None else row.get("error", "-"),
                      *cells(row))
    wide_console().print(table)
    _why(result)


#: The work columns of a request/reply table (a3m.benchmarks.work's units): per round trip,
#: both sides added up.
WORK_COLUMNS = {"cpu_us": "CPU us", "wakeups": "wake-ups", "py_calls": "Py calls",
                "allocations": "allocs", "syscalls": "syscalls"}
#: The caption under a table with work columns.
WORK_CAPTION = "work per round trip, both sides added up"
_WORK_FORMAT = {"cpu_us": "{:,.1f}", "wakeups": "{:.2f}", "py_calls": "{:,.1f}",
                "allocations": "{:,.1f}", "syscalls": "{:,.1f}"}


def wide_console() -> Any:
    """A console on stderr at least 100 columns wide where it is not a terminal (a pipe, a
    file: rich's default there is 80, too narrow for the work columns)."""
    from rich.console import Console

    console = Console(stderr=True)
    if not console.is_terminal and console.width < 100:
        console.width = 100
    return console


def work_units(runs: list[dict[str, Any] | None]) -> list[str]:
    """The units of work that some of ``runs`` (each a run's work by side) has a figure
    for: the table's columns (Python calls and system calls: with --count)."""
    from a3m.benchmarks.work import total

    totals = [total(sides) for sides in runs]
    return [u for u in WORK_COLUMNS if any(t[u] is not None for t in totals)]


def work_cells(sides: dict[str, Any] | None, units: list[str]) -> list[str]:
    """A run's work per round trip (:func:`a3m.benchmarks.work.total`) as the table's
    cells, "-" where there is no figure."""
    from a3m.benchmarks.work import total

    t = total(sides)
    return [_WORK_FORMAT[u].format(t[u]) if t[u] is not None else "-" for u in units]


def _why(result: dict[str, Any]) -> None:
    """Why a unit of work is missing (the JSON's ``*_why``), under the table."""
    if result.get("counted") is False:
        print("Python calls and system calls per round trip: with --count", file=sys.stderr)
    for key, what in (("allocations_why", "allocations"), ("syscalls_why", "system calls")):
        if result.get(key) and (key != "syscalls_why" or result.get("counted")):
            print(f"{what} not counted: {result[key]}", file=sys.stderr)


WORKLOADS: dict[str, Workload] = _workloads()
#: The workloads' names (``a3m bench WORKLOAD``).
BENCH_WORKLOADS = tuple(WORKLOADS)
