"""The collector: the A3M node behind the streaming source, in a process of its own.

Spark runs a source's offset methods in a Python process that lives for one query run and is
killed when the query stops, so a node living there would vanish with every restart (and with
it what its socket held). The source therefore starts this collector lazily, once per spool
directory, on the host where Spark runs the source; it outlives query runs:

- it owns the node (``--node``, ``--bind``) and one PULL or SUB socket (``--socket``);
- it moves what the socket delivers into the :class:`~a3m.spark.spool.Spool` in batches, each
  fsync'd before the next is taken, so a message leaves the node's memory only once durable;
- when more than ``--max-pending`` rows wait for Spark to commit, it stops taking messages:
  the socket's credits run out and the producers block (back-pressure, nothing dropped);
- it exits cleanly (unlinking, spooling what was still in flight, flushing its journal) on a
  ``stop`` file in the spool directory, on SIGTERM, or after ``--idle-timeout`` seconds
  without a heartbeat from any source (the source touches ``heartbeat`` on every call).

One collector per spool directory: an exclusive lock (``collector.lock``) makes a second one
exit at once. ``collector.json`` holds its pid and address once it is up.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from a3m.spark.spool import Spool

LOCK, INFO, STOP, HEARTBEAT, LOG = ("collector.lock", "collector.json", "stop", "heartbeat",
                                    "collector.log")


def _args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m a3m.spark.collector")
    p.add_argument("--spool", required=True)
    p.add_argument("--node", required=True)
    p.add_argument("--bind", default="127.0.0.1:0")
    p.add_argument("--socket", default="events")
    p.add_argument("--type", default="PULL", choices=("PULL", "SUB"))
    p.add_argument("--topics", default="", help="SUB: comma-separated topic prefixes")
    p.add_argument("--journal", default=None)
    p.add_argument("--capacity", type=int, default=1024)
    p.add_argument("--batch-rows", type=int, default=5000)
    p.add_argument("--batch-ms", type=float, default=20.0)
    p.add_argument("--max-pending", type=int, default=200_000)
    p.add_argument("--idle-timeout", type=float, default=120.0)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = _args(argv)
    spool = Spool(args.spool)
    lock = open(spool.dir / LOCK, "a+")  # noqa: SIM115 - held for the process's life
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return 0  # another collector serves this spool
    (spool.dir / STOP).unlink(missing_ok=True)
    stopping = False

    def on_term(*_: Any) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, on_term)
    import a3m

    node = a3m.Node(args.node, bind=args.bind, journal=args.journal)
    try:
        kind = a3m.SUB if args.type == "SUB" else a3m.PULL
        sock = node.socket(kind, args.socket, capacity=args.capacity)
        if kind == a3m.SUB:
            for topic in [t for t in args.topics.split(",") if t] or [""]:
                sock.subscribe(topic)
        info = {"pid": os.getpid(), "node": node.id, "address": list(node.address),
                "socket": args.socket, "started": time.time(),
                "config": {"node": args.node, "bind": args.bind, "socket": args.socket,
                           "type": args.type, "topics": args.topics}}
        tmp = spool.dir / f".{INFO}.tmp"
        tmp.write_text(json.dumps(info))
        os.replace(tmp, spool.dir / INFO)
        _touch(spool.dir / HEARTBEAT)
        _serve(args, spool, sock, lambda: stopping)
        sock.close(timeout=10)  # unlink: what peers had in flight still arrives
        _drain(spool, sock, args.batch_rows)
    finally:
        node.close(timeout=10)
        (spool.dir / INFO).unlink(missing_ok=True)
    return 0


def _touch(path: Path) -> None:
    path.touch()
    os.utime(path)


def _serve(args: argparse.Namespace, spool: Spool, sock: Any, stopping: Any) -> None:
    import a3m

    batch_s = args.batch_ms / 1000
    last_check = 0.0
    while not stopping():
        now = time.monotonic()
        if now - last_check > 0.5:
            last_check = now
            if (spool.dir / STOP).exists():
                return
            try:
                idle = time.time() - (spool.dir / HEARTBEAT).stat().st_mtime
            except FileNotFoundError:
                idle = 0.0
            if idle > args.idle_timeout:
                return
        if spool.pending() >= args.max_pending:
            time.sleep(0.05)  # Spark is behind: leave messages in the socket (credits)
            continue
        rows = _take(sock, args.batch_rows, batch_s, a3m)
        if rows["payload"]:
            spool.append(rows)


def _take(sock: Any, limit: int, window_s: float, a3m: Any) -> dict[str, list[Any]]:
    rows: dict[str, list[Any]] = {"node": [], "socket": [], "topic": [], "payload": [],
                                  "received_at": []}
    deadline = time.monotonic() + window_s
    while len(rows["payload"]) < limit:
        left = deadline - time.monotonic()
        try:
            msg = sock.recv_msg(timeout=max(0.0, left) if rows["payload"] else window_s)
        except (a3m.Timeout, a3m.WouldBlock, a3m.Closed):
            break
        rows["node"].append(msg.source.node)
        rows["socket"].append(msg.source.tag)
        rows["topic"].append(msg.topic)
        rows["payload"].append(msg.payload)
        rows["received_at"].append(datetime.now(UTC))
        if left <= 0:
            break
    return rows


def _drain(spool: Spool, sock: Any, limit: int) -> None:
    import a3m

    while True:
        rows = _take(sock, limit, 0.0, a3m)
        if not rows["payload"]:
            return
        spool.append(rows)


# ---------------------------------------------------------------------- control from outside

class CollectorMismatch(RuntimeError):
    """The spool is served by a collector started with other options."""


def ensure_running(spool_dir: str | os.PathLike[str], cmd_args: list[str],
                   wait_s: float = 30.0, config: dict[str, str] | None = None
                   ) -> dict[str, Any]:
    """Start a collector for ``spool_dir`` unless one runs; wait until it is up; its info.
    With ``config``, a running collector must have been started with exactly those options
    (node, bind, socket, type, topics): else :class:`CollectorMismatch`, never a silent
    attach to a node the producers were not told about."""
    d = Path(spool_dir)
    d.mkdir(parents=True, exist_ok=True)
    _touch(d / HEARTBEAT)
    info = running(d)
    if info is not None:
        theirs = info.get("config")
        if config is not None and theirs != config:
            raise CollectorMismatch(
                f"the spool {d} is served by a collector started with {theirs}; this query "
                f"asks for {config}. Give each source its own spool (or stop that collector: "
                f"a3m.spark.collector.stop({str(d)!r})).")
        return info
    with open(d / LOG, "ab") as log:
        subprocess.Popen(
            [sys.executable, "-m", "a3m.spark.collector", "--spool", str(d), *cmd_args],
            stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True,
            close_fds=True)
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        info = running(d)
        if info is not None:
            return info
        time.sleep(0.05)
    raise RuntimeError(f"the A3M collector for {d} did not start in {wait_s} s "
                       f"(see {d / LOG})")


def running(spool_dir: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The info of the collector serving ``spool_dir`` if it is alive, else None.

    (Probing the lock itself could make a collector that is starting lose it.)"""
    try:
        info: dict[str, Any] = json.loads((Path(spool_dir) / INFO).read_text())
        cmdline = Path(f"/proc/{int(info['pid'])}/cmdline").read_bytes()
    except (FileNotFoundError, ProcessLookupError, json.JSONDecodeError, KeyError, ValueError):
        return None
    return info if b"a3m.spark.collector" in cmdline else None


def heartbeat(spool_dir: str | os.PathLike[str]) -> None:
    _touch(Path(spool_dir) / HEARTBEAT)


def stop(spool_dir: str | os.PathLike[str], timeout: float = 30.0) -> bool:
    """Ask the collector of ``spool_dir`` to exit cleanly; True once it has."""
    d = Path(spool_dir)
    if running(d) is None:
        return True
    (d / STOP).touch()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if running(d) is None:
            return True
        time.sleep(0.05)
    return False


if __name__ == "__main__":
    sys.exit(main())
