"""Where a REQ/REP round trip goes in running nodes: a client and a server process (pinned to
CPUs 0 and 1) time-stamp the driver's steps on the shared monotonic clock, and the medians of
each step over the round trips are printed, secure and opt-out alternately::

    .venv/bin/python bench/rr_timeline.py [--round-trips 5000] [--pairs 2] [--aead] [--halves]
                                          [--count]

Steps: ``c.send`` the client's ``send`` until its ``sendto`` returned; ``wire>srv`` until the
server's wait for input returned; ``s.turn`` the server's turn (receive, open, Exon, core);
``s.app`` until ``recv`` returned; ``s.send`` the reply until ``sendto`` returned; then the
same on the way back. The steps wrap the driver's methods, so the timing runs the Python
sources (``A3M_PURE_PYTHON=1``: the compiled ``Driver`` is a native class); where the native
engine's leader waits (``lead_io``), ``wire>srv`` and ``s.turn`` have no stamp of their own.
``--aead`` also times each ChaCha20-Poly1305 call and the secure layer's ``open`` and
``seal``.

``--count``: instead of the times, the work of one round trip in each process, per layer
(``bench/work_units.py``: Python calls, C calls, allocations), the runtime's included, every
thread counted. It runs with ``busy_poll_s=0`` (a busy poll's calls grow with the time it
waits) and under the profiler a round trip is several times slower, so the I/O thread's
wake-ups (every ``PARK_S``) add calls that a faster run does not make.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

WARMUP = 300
STEPS = ("c.send", "wire>srv", "s.turn", "s.app", "s.send", "wire>cli", "c.turn", "c.app",
         "total")
_last: dict[str, int] = {}  # the driver's last step times (ns), per process
_spent: dict[str, list[int]] = {}  # --aead: total ns and calls per wrapped function


def _stamp_driver() -> None:
    from a3m.runtime import driver

    for name, label in (("_send_now", "sent"), ("_wait_for_input", "woke"),
                        ("_turn", "turned")):
        fn = getattr(driver.Driver, name)

        def stamped(*a: Any, _fn: Callable[..., Any] = fn, _label: str = label,
                    **kw: Any) -> Any:
            try:
                return _fn(*a, **kw)
            finally:
                _last[_label] = time.perf_counter_ns()

        setattr(driver.Driver, name, stamped)


def _timed(label: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    def timed(*a: Any) -> Any:
        t = time.perf_counter_ns()
        try:
            return fn(*a)
        finally:
            acc = _spent.setdefault(label, [0, 0])
            acc[0] += time.perf_counter_ns() - t
            acc[1] += 1
    return timed


def _time_aead() -> None:
    from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305

    from a3m.exon.secure import layer, session

    class TimedAead:
        def __init__(self, key: bytes) -> None:
            aead = ChaCha20Poly1305(key)
            self.encrypt = _timed("encrypt", aead.encrypt)
            self.decrypt = _timed("decrypt", aead.decrypt)

    session.ChaCha20Poly1305 = TimedAead  # type: ignore[misc,assignment]
    layer.SecureLayer.open = _timed("open", layer.SecureLayer.open)  # type: ignore[method-assign]
    layer.SecureLayer.seal = _timed("seal", layer.SecureLayer.seal)  # type: ignore[method-assign]


def _spent_us() -> str:
    return " ".join(f"{k}={t / n / 1000:.2f}" for k, (t, n) in sorted(_spent.items()) if n)


def _work_counter() -> Any:
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from work_units import WorkCounter

    work = WorkCounter()
    work.start()  # before the node: its I/O thread is counted too
    return work


def _server(ready: Any, results: Any, n: int, secure: bool, count: bool = False) -> None:
    import a3m

    os.sched_setaffinity(0, {1})
    rows = []
    work = _work_counter() if count else None
    with a3m.Node("tl-srv", secure=secure, **({"busy_poll_s": 0} if count else {})) as node:
        rep = node.socket(a3m.REP, "rep")
        ready.put(node.address)
        for i in range(n + WARMUP):
            if work is not None and i == WARMUP:
                work.reset()
            _last.clear()
            msg = rep.recv(timeout=60)
            got = time.perf_counter_ns()
            woke, turned = _last.get("woke", 0), _last.get("turned", 0)
            rep.send(msg, timeout=60)
            rows.append((woke, turned, got, _last.get("sent", 0)))
        if work is not None:
            work.stop()
        results.put((rows[WARMUP:], _spent_us() if work is None else work.table(
            n, "  server, per round trip") + ("\n" + work.top(n) if os.environ.get(
                "A3M_COUNT_TOP") else "")))
        time.sleep(0.3)


def _run(n: int, secure: bool, halves: bool = False, count: bool = False) -> str:
    import a3m

    ready, results = mp.Queue(), mp.Queue()
    server = mp.Process(target=_server, args=(ready, results, n, secure, count))
    server.start()
    address = ready.get(timeout=60)
    os.sched_setaffinity(0, {0})
    rows = []
    work = _work_counter() if count else None
    with a3m.Node("tl-cli", secure=secure, **({"busy_poll_s": 0} if count else {})) as node:
        node.associate("tl-srv", tuple(address))
        req = node.socket(a3m.REQ, "req")
        req.link("tl-srv/rep")
        if not req.wait_linked(timeout=30):
            raise RuntimeError("could not link")
        body = b"x" * 64
        for i in range(n + WARMUP):
            if work is not None and i == WARMUP:
                work.reset()
            _last.clear()
            t0 = time.perf_counter_ns()
            req.send(body, timeout=10)
            sent = _last.get("sent", 0)
            _last.pop("woke", None)
            _last.pop("turned", None)
            req.recv(timeout=10)
            rows.append((t0, sent, _last.get("woke", 0), _last.get("turned", 0),
                         time.perf_counter_ns()))
        if work is not None:
            work.stop()
    srows, server_spent = results.get(timeout=60)
    server.join()
    if work is not None:
        return (f"{'secure' if secure else 'opt-out'} compiled={a3m.COMPILED}, {n} round trips "
                f"(busy_poll_s=0)\n{work.table(n, '  client, per round trip')}\n"
                + (work.top(n) + "\n" if os.environ.get("A3M_COUNT_TOP") else "")
                + server_spent)
    steps: dict[str, list[int]] = {k: [] for k in STEPS}
    for (t0, cs, cw, ct, t4), (sw, st, sr, ss) in zip(rows[WARMUP:], srows, strict=True):
        if not all((cs, cw, ct, sw, st, ss)):
            continue  # a step ran on another thread (the I/O thread): no stamp here
        for k, v in zip(STEPS, (cs - t0, sw - cs, st - sw, sr - st, ss - sr, cw - ss,
                                ct - cw, t4 - ct, t4 - t0), strict=True):
            steps[k].append(v)
    line = (f"{'secure' if secure else 'opt-out'} compiled={a3m.COMPILED} "
            f"n={len(steps['total'])} "
            + " ".join(f"{k}={statistics.median(v) / 1000:.1f}" for k, v in steps.items() if v))
    if halves and steps["total"]:
        # The faster and the slower half of the round trips, each step's median in each: a
        # step of ours that is slow now and then stands out alone; a host that slows down
        # stretches every step, the wire's included.
        order = sorted(range(len(steps["total"])), key=steps["total"].__getitem__)
        half = len(order) // 2
        for name, part in (("  faster half", order[:half]), ("  slower half", order[half:])):
            line += f"\n{name}: " + " ".join(
                f"{k}={statistics.median(v[i] for i in part) / 1000:.1f}"
                for k, v in steps.items())
    if _spent:
        line += f"\n  client us per call: {_spent_us()}\n  server us per call: {server_spent}"
        _spent.clear()
    return line


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--round-trips", type=int, default=5000)
    ap.add_argument("--pairs", type=int, default=2, help="secure and opt-out runs, alternately")
    ap.add_argument("--aead", action="store_true")
    ap.add_argument("--halves", action="store_true",
                    help="also each step's median in the faster and the slower half")
    ap.add_argument("--count", action="store_true",
                    help="the work per round trip in each process, per layer, not the times")
    args = ap.parse_args()
    if args.aead or not args.count:
        # before a3m loads: wrapping needs the sources (the compiled Driver is a native
        # class, whose methods cannot be replaced)
        os.environ["A3M_PURE_PYTHON"] = "1"
    if not args.count:
        _stamp_driver()
    if args.aead:
        _time_aead()
    for _ in range(args.pairs):
        for secure in (True, False) if not args.aead else (True,):
            print(_run(args.round_trips, secure, args.halves, args.count), flush=True)


if __name__ == "__main__":
    mp.set_start_method("fork")
    sys.exit(main())
