"""System calls per REQ/REP round trip in running nodes (both processes): ``a3m bench reqrep
--no-baselines`` under ``perf stat`` (kernel tracepoints, which barely slow the calls), at two
round-trip counts; the difference divided by the extra round trips takes set-up and close out::

    .venv/bin/python bench/rr_syscalls.py [--round-trips 20000]

Needs ``perf`` and access to the syscall tracepoints (root, or perf_event_paranoid <= -1).
A leader's busy poll (a look with no timeout: ``poll``, ``pselect6`` before issue 33, and a
``sched_yield`` after each look that found nothing) makes calls in proportion to the time it
waits: those move with the machine's speed and load. "fixed" sums the others (``poll``
aside: it also counts the leader's look before a second read, one per datagram received;
``poll`` less ``sched_yield`` is those looks plus the busy polls' last looks, the ones that
found input). (``a3m bench reqrep --asyncio`` cannot leave its pyzmq baselines out: it is
not measured here.)
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

CALLS = ("sendto", "recvfrom", "poll", "futex", "read", "write", "epoll_wait", "pselect6",
         "sched_yield")


def run(n: int, extra: list[str]) -> tuple[dict[str, int], dict[str, object]]:
    a3m = os.path.join(os.path.dirname(sys.executable), "a3m")
    events = [f"syscalls:sys_enter_{c}" for c in CALLS] + ["raw_syscalls:sys_enter"]
    with tempfile.NamedTemporaryFile("r", suffix=".perf") as out:
        proc = subprocess.run(
            ["perf", "stat", "-x", ",", "-o", out.name, "-e", ",".join(events), "--",
             a3m, "bench", "reqrep", "--no-baselines", "--messages", str(n), "--json",
             *extra], check=True, capture_output=True, text=True)
        counts: dict[str, int] = {}
        for line in out.read().splitlines():
            cols = line.split(",")
            if len(cols) > 2 and cols[2].startswith(("syscalls:", "raw_syscalls:")):
                name = cols[2].split(":")[1].removeprefix("sys_enter_")
                counts["all" if name == "sys_enter" else name] = int(cols[0]) \
                    if cols[0].isdigit() else 0
    return counts, json.loads(proc.stdout)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--round-trips", type=int, default=20000)
    args = ap.parse_args()
    if shutil.which("perf") is None:
        sys.exit("perf is not installed")
    extra: list[str] = []
    small = max(1000, args.round_trips // 10)
    lo, _ = run(small, extra)
    hi, result = run(args.round_trips, extra)
    per = {c: (hi.get(c, 0) - lo.get(c, 0)) / (args.round_trips - small) for c in (*CALLS, "all")}
    print(f"system calls per round trip, both processes ({args.round_trips} - {small} "
          "round trips):")
    per["fixed"] = sum(per[c] for c in ("sendto", "recvfrom", "futex", "read", "write",
                                        "epoll_wait"))
    for c in (*CALLS, "all", "fixed"):
        print(f"  {c:12s} {per[c]:7.2f}")
    runs = result.get("results", result)
    print(json.dumps(runs)[:600])


if __name__ == "__main__":
    main()
