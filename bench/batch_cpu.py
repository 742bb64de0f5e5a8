"""A PUSH/PULL stream's CPU per message on each side (the whole process's, set-up included),
with the rate: the ``a3m bench pushpull`` sender and receiver, in two processes the scheduler
places freely (the bench pins them, and its rate with ``--batch`` moves by 2x between runs on
a shared host; CPU per message moves much less)::

    .venv/bin/python bench/batch_cpu.py [BATCH] [MESSAGES]    # e.g. 64 4000000; 0: send()

Run it beside an older tree (``PYTHONPATH=that/src``), interleaved, to compare two builds.
"""

from __future__ import annotations

import multiprocessing as mp
import sys
from typing import Any

from a3m.benchmarks.pushpull import pull_receiver, push_sender
from a3m.benchmarks.work import Work


def receiver(ready: Any, results: Any, messages: int, size: int, **kw: Any) -> None:
    work = Work()
    work.start()
    pull_receiver(ready, results, messages, size, **kw)
    results.put({"side": "receiver_work", **work.report(messages)})


def sender(address: Any, results: Any, messages: int, size: int, **kw: Any) -> None:
    work = Work()
    work.start()
    push_sender(address, results, messages, size, **kw)
    results.put({"side": "sender_work", **work.report(messages)})


def main() -> None:
    batch = int(sys.argv[1]) if len(sys.argv) > 1 else 64
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 4_000_000
    ctx = mp.get_context("spawn")
    ready, results = ctx.Queue(), ctx.Queue()
    rx = ctx.Process(target=receiver, args=(ready, results, n, 64), kwargs={"batch": batch})
    rx.start()
    address = ready.get(timeout=60)
    tx = ctx.Process(target=sender, args=(address, results, n, 64), kwargs={"batch": batch})
    tx.start()
    out = {}
    for _ in range(4):
        got = results.get(timeout=600)
        out[got["side"]] = got
    rx.join(60)
    tx.join(60)
    print(f"batch {batch}: {out['receiver']['msgs_per_s']:,.0f} msg/s; CPU a message: sender "
          f"{out['sender_work']['cpu_us']:.3f} us, receiver "
          f"{out['receiver_work']['cpu_us']:.3f} us")


if __name__ == "__main__":
    main()
