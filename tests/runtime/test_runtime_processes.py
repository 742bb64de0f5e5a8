"""Endpoints in separate processes over real UDP: an echo node in a spawned process answers
everything it receives; it can be told to move to 127.0.0.2 mid-stream."""

from __future__ import annotations

import multiprocessing as mp
import time
from typing import Any

from a3m.exon import Endpoint

STOP, MOVE = b"\x00stop", b"\x00move"


def echo_node(ready: Any, done: Any) -> None:
    """Child process: echo each payload to its sender until STOP; MOVE rebinds to 127.0.0.2."""
    try:
        with Endpoint("echo") as ep:
            ready.put(ep.address)
            echoed = 0
            while True:
                src, payload = ep.recv(timeout=60)
                if payload == STOP:
                    break
                if payload == MOVE:
                    ep.rebind("127.0.0.2:0")
                    continue
                ep.send(src, payload, timeout=30)
                echoed += 1
            host = ep.address[0]
            clean = ep.close(timeout=30)
            done.put({"echoed": echoed, "clean": clean, "address": host})
    except Exception as exc:  # report instead of leaving the parent waiting
        done.put({"error": repr(exc)})


def run_echo(payloads: list[bytes], move_at: int | None = None
             ) -> tuple[list[bytes], dict[str, Any], dict[str, int]]:
    """Send ``payloads`` to an echo process (MOVE after ``move_at``); return echoes and reports."""
    ctx = mp.get_context("spawn")
    ready: Any = ctx.Queue()
    done: Any = ctx.Queue()
    child = ctx.Process(target=echo_node, args=(ready, done), daemon=True)
    child.start()
    try:
        addr = ready.get(timeout=60)
        with Endpoint("client") as ep:
            ep.associate("echo", tuple(addr))
            back: list[bytes] = []
            for i, p in enumerate(payloads):
                ep.send("echo", p, timeout=30)
                if i == move_at:
                    ep.send("echo", MOVE, timeout=30)
                while True:  # keep the echoes flowing so neither side's window stays full
                    try:
                        back.extend(q for _, q in ep.recv_many(4096, timeout=0))
                    except Exception:
                        break
            deadline = time.monotonic() + 60
            while len(back) < len(payloads) and time.monotonic() < deadline:
                back.extend(q for _, q in ep.recv_many(4096, timeout=60))
            # The move counts once the new path answered its challenge, which can come after
            # the last echo on a busy machine: waited for while the echo node still runs.
            while (move_at is not None and ep.stats["address_changes"] == 0
                   and time.monotonic() < deadline):
                time.sleep(0.01)
            rid = ep.send("echo", STOP, receipt=True, timeout=30)
            assert rid is not None and ep.wait_receipt(rid, timeout=30)
            report = done.get(timeout=60)
            stats = ep.stats
        return back, report, stats
    finally:
        child.join(timeout=10)
        if child.is_alive():
            child.kill()


def test_echo_across_processes_exactly_once() -> None:
    payloads = [b"%d:" % i + b"x" * (i % 1500) for i in range(3000)]
    payloads.append(bytes(range(256)) * 4096)  # one 1 MiB message among them
    back, report, stats = run_echo(payloads)
    assert "error" not in report, report
    assert sorted(back) == sorted(payloads)  # each echoed once: nothing lost, nothing twice
    assert report["echoed"] == len(payloads) and report["clean"] is True
    assert stats["loop_errors"] == 0


def test_echo_node_moves_to_127_0_0_2_mid_stream() -> None:
    payloads = [b"%d" % i for i in range(5000)]
    back, report, stats = run_echo(payloads, move_at=1500)
    assert "error" not in report, report
    assert sorted(back) == sorted(payloads)  # nothing lost, nothing twice
    assert report["address"] == "127.0.0.2"
    assert stats["address_changes"] >= 1  # the client followed the move
