"""Run a sender and a receiver in separate processes and collect what each reports."""

from __future__ import annotations

import multiprocessing as mp
import os
import queue
from collections.abc import Callable
from typing import Any

Report = dict[str, Any]
#: A receiver: ``fn(ready_queue, result_queue, **params)``; it puts its address on
#: ``ready_queue``, then its report on ``result_queue``.
Side = Callable[..., None]


class WorkerFailed(RuntimeError):
    """A benchmark process failed or did not report in time."""


#: Where the two processes run: ``spread`` pins the receiver to CPU 0 and the sender to CPU 1,
#: ``shared`` pins both to CPU 0, ``free`` leaves it to the scheduler (whose choice changes a
#: round trip's latency by 2-3x on this machine: ANCHORS part C), so runs compare like with like.
PLACEMENTS = ("spread", "shared", "free")


def cpus_for(placement: str) -> tuple[set[int] | None, set[int] | None]:
    """(receiver CPUs, sender CPUs) for a placement; ``free`` where pinning is not possible."""
    if placement not in PLACEMENTS:
        raise ValueError(f"placement must be one of {', '.join(PLACEMENTS)}")
    usable = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    if placement == "free" or not usable or (placement == "spread" and len(usable) < 2):
        return None, None
    if placement == "shared":
        return {usable[0]}, {usable[0]}
    return {usable[0]}, {usable[1]}


def _pinned(fn: Side, cpus: set[int] | None, *args: Any, **kwargs: Any) -> None:
    if cpus:
        os.sched_setaffinity(0, cpus)
    fn(*args, **kwargs)


def run_pair(receiver: Side, sender: Side, params: dict[str, Any], timeout: float = 120.0,
             via: Callable[[Any], Any] | None = None, placement: str = "free"
             ) -> tuple[Report, Report]:
    """Start ``receiver``, pass its address to ``sender``, return (receiver, sender) reports.

    ``via`` maps the receiver's address to the one the sender should use (a relay's front);
    ``placement`` pins the two processes (:data:`PLACEMENTS`).
    """
    ctx = mp.get_context("spawn")
    ready: Any = ctx.Queue()
    results: Any = ctx.Queue()
    rx_cpus, tx_cpus = cpus_for(placement)
    rx = ctx.Process(target=_pinned, args=(receiver, rx_cpus, ready, results), kwargs=params,
                     daemon=True)
    rx.start()
    try:
        try:
            address = ready.get(timeout=60)
        except queue.Empty as exc:
            raise WorkerFailed(f"{receiver.__name__} did not start") from exc
        if via is not None:
            address = via(address)
        tx = ctx.Process(target=_pinned, args=(sender, tx_cpus, address, results),
                         kwargs=params, daemon=True)
        tx.start()
        reports: dict[str, Report] = {}
        try:
            for _ in range(2):
                rep = results.get(timeout=timeout)
                reports[rep["side"]] = rep
        except queue.Empty as exc:
            raise WorkerFailed(f"{sender.__name__}/{receiver.__name__} timed out") from exc
        finally:
            tx.join(timeout=10)
            if tx.is_alive():
                tx.kill()
        for rep in reports.values():
            if "error" in rep:
                raise WorkerFailed(f"{rep['side']}: {rep['error']}")
        return reports["receiver"], reports["sender"]
    finally:
        rx.join(timeout=10)
        if rx.is_alive():
            rx.kill()
