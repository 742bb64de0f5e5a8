"""Run a sender and a receiver in separate processes and collect what each reports."""

from __future__ import annotations

import multiprocessing as mp
import queue
from collections.abc import Callable
from typing import Any

Report = dict[str, Any]
#: A receiver: ``fn(ready_queue, result_queue, **params)``; it puts its address on
#: ``ready_queue``, then its report on ``result_queue``.
Side = Callable[..., None]


class WorkerFailed(RuntimeError):
    """A benchmark process failed or did not report in time."""


def run_pair(receiver: Side, sender: Side, params: dict[str, Any], timeout: float = 120.0,
             via: Callable[[Any], Any] | None = None) -> tuple[Report, Report]:
    """Start ``receiver``, pass its address to ``sender``, return (receiver, sender) reports.

    ``via`` maps the receiver's address to the one the sender should use (a relay's front).
    """
    ctx = mp.get_context("spawn")
    ready: Any = ctx.Queue()
    results: Any = ctx.Queue()
    rx = ctx.Process(target=receiver, args=(ready, results), kwargs=params, daemon=True)
    rx.start()
    try:
        try:
            address = ready.get(timeout=60)
        except queue.Empty as exc:
            raise WorkerFailed(f"{receiver.__name__} did not start") from exc
        if via is not None:
            address = via(address)
        tx = ctx.Process(target=sender, args=(address, results), kwargs=params, daemon=True)
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
