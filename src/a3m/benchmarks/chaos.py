"""Run a workload across the fault-injecting relay and check exactly-once from the receiver's
own audit of sequence numbers."""

from __future__ import annotations

import time
from typing import Any

from a3m.benchmarks.procs import run_pair
from a3m.benchmarks.registry import WORKLOADS, Progress, machine
from a3m.testing.relay import FaultRelay


def run_chaos(name: str, messages: int, loss: float, dup: float, reorder: float,
              seed: int = 1, size: int = 64, progress: Progress = lambda _: None
              ) -> dict[str, Any]:
    wl = WORKLOADS[name]
    relays: list[FaultRelay] = []

    def via(address: Any) -> Any:
        relay = FaultRelay({"rx": tuple(address)}, loss=loss, dup=dup, reorder=reorder,
                           seed=seed)
        relays.append(relay)
        return relay.front("rx")

    progress(f"chaos {name}: {messages} messages, loss {loss}, dup {dup}, reorder {reorder}")
    t0 = time.perf_counter()
    try:
        rx, tx = run_pair(wl.receiver, wl.sender,
                          {"messages": messages, "size": size, "check": True},
                          timeout=900, via=via)
    finally:
        for r in relays:
            r.close()
    relay_stats = relays[0].stats.as_dict() if relays else {}
    if wl.metric == "latency":  # request/reply: the server audits requests, the client replies
        answered = tx["round_trips"]
        return {
            "workload": name, "sent": tx["sent"], "delivered": rx["distinct"],
            "answered": answered, "wrong_answers": tx["wrong_answers"],
            "duplicates": rx["duplicates"], "lost": tx["sent"] - rx["distinct"],
            "phantoms": tx["wrong_answers"],
            "exactly_once": (rx["duplicates"] == 0 and rx["distinct"] == tx["sent"]
                             and answered == tx["sent"] and tx["wrong_answers"] == 0),
            "p50_us": tx["p50_us"], "p99_us": tx["p99_us"],
            "loss": loss, "dup": dup, "reorder": reorder, "seed": seed, "relay": relay_stats,
            "elapsed_s": round(time.perf_counter() - t0, 2), "machine": machine(),
        }
    result: dict[str, Any] = {
        "workload": name, "sent": tx["sent"], "delivered": rx["received"],
        "distinct": rx["distinct"], "duplicates": rx["duplicates"], "lost": rx["lost"],
        "phantoms": rx["phantoms"], "in_order": rx.get("in_order"),
        "exactly_once": rx["duplicates"] == 0 and rx["lost"] == 0 and rx["phantoms"] == 0,
        "loss": loss, "dup": dup, "reorder": reorder, "seed": seed,
        "relay": relay_stats,
        "retransmits": (tx.get("stats") or {}).get("retransmits"),
        "elapsed_s": round(time.perf_counter() - t0, 2),
        "machine": machine(),
    }
    return result
