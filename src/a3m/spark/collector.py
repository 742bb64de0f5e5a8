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
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from a3m.spark.spool import Spool

PART_PREFIX = "part-"  # a3m.spark.spool's (not imported here: `a3m collect --help` stays light)

LOCK, INFO, STOP, HEARTBEAT, LOG = ("collector.lock", "collector.json", "stop", "heartbeat",
                                    "collector.log")


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The options of a collector (``python -m a3m.spark.collector`` or ``a3m collect``)."""
    p.add_argument("--spool", required=True,
                   help="the spool directory this collector writes (one source partition)")
    p.add_argument("--node", required=True, help="the receiving node's id")
    p.add_argument("--bind", default="127.0.0.1:0", help="host:port producers send to")
    p.add_argument("--socket", default="events", help="the socket's tag (default events)")
    p.add_argument("--type", default="PULL", choices=("PULL", "SUB"))
    p.add_argument("--topics", default="", help="SUB: comma-separated topic prefixes")
    p.add_argument("--journal", default=None, help="a delivery-journal directory")
    p.add_argument("--capacity", type=int, default=1024)
    p.add_argument("--batch-rows", type=int, default=5000)
    p.add_argument("--batch-ms", type=float, default=20.0)
    p.add_argument("--max-pending", type=int, default=200_000,
                   help="rows spooled and not committed before producers are held back")
    p.add_argument("--dedup", action="store_true",
                   help="messages come from an idempotent a3m sink: unwrap each one and drop "
                        "repeats (state in <spool>/dedup.json)")
    p.add_argument("--idle-timeout", type=float, default=120.0,
                   help="exit after this many seconds without a query (0: never)")
    p.add_argument("--metrics-port", type=int, default=0, metavar="PORT",
                   help="serve the node's metrics for Prometheus at "
                        "http://HOST:PORT/metrics (needs a3m[metrics]; 0: off)")
    p.add_argument("--metrics-host", default="127.0.0.1", metavar="HOST",
                   help="the address the metrics are served on (default 127.0.0.1)")


def _args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m a3m.spark.collector")
    add_arguments(p)
    return p.parse_args(argv)


def run(args: argparse.Namespace) -> int:
    """``a3m collect``: serve one spool partition until stopped (SIGTERM, Ctrl-C, the
    ``stop`` file, or ``--idle-timeout``), on any host; a source with
    ``.option("collectors", "external")`` reads what it spools."""
    argv = ["--spool", args.spool, "--node", args.node, "--bind", args.bind,
            "--socket", args.socket, "--type", args.type, "--topics", args.topics,
            "--capacity", str(args.capacity), "--batch-rows", str(args.batch_rows),
            "--batch-ms", str(args.batch_ms), "--max-pending", str(args.max_pending),
            "--idle-timeout", str(args.idle_timeout)]
    if args.journal:
        argv += ["--journal", args.journal]
    if args.dedup:
        argv.append("--dedup")
    if args.metrics_port:
        argv += ["--metrics-port", str(args.metrics_port), "--metrics-host", args.metrics_host]
    signal.signal(signal.SIGINT, lambda *_: os.kill(os.getpid(), signal.SIGTERM))
    return main(argv)


def main(argv: list[str] | None = None) -> int:
    from a3m.spark.spool import Spool

    args = _args(argv)
    spool = Spool(args.spool)
    lock = open(spool.dir / LOCK, "a+")  # noqa: SIM115 - held for the process's life
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        print(f"a collector already serves {spool.dir}", file=sys.stderr)
        return 1  # another collector serves this spool
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
                           "type": args.type, "topics": args.topics,
                           **({"dedup": "true"} if args.dedup else {})}}
        tmp = spool.dir / f".{INFO}.tmp"
        tmp.write_text(json.dumps(info))
        os.replace(tmp, spool.dir / INFO)
        _touch(spool.dir / HEARTBEAT)
        print(f"collecting: node {node.id} at {node.address[0]}:{node.address[1]}, socket "
              f"{args.socket!r}, spool {spool.dir}", file=sys.stderr, flush=True)
        if args.metrics_port:
            from a3m.metrics import serve

            metrics = serve(node, args.metrics_port, args.metrics_host)
            print(f"metrics: http://{args.metrics_host}:{metrics.server_port}/metrics",
                  file=sys.stderr, flush=True)
        keep = _keeper(spool, args.dedup)
        _serve(args, spool, sock, lambda: stopping, keep)
        sock.close(timeout=10)  # unlink: what peers had in flight still arrives
        _drain(spool, sock, args.batch_rows, keep)
    finally:
        node.close(timeout=10)
        (spool.dir / INFO).unlink(missing_ok=True)
    return 0


def _touch(path: Path) -> None:
    path.touch()
    os.utime(path)


Keep = Any  # (spool, rows) -> None: append what is to be kept


def _keeper(spool: Spool, dedup: bool) -> Keep:
    """How rows reach the spool: as they come, or (``--dedup``) unwrapped from the idempotent
    sink's envelope with repeats dropped. The de-duplication state is saved (fsync'd, renamed)
    right after each segment is durable: a collector killed between the two may take the
    repeats of that one segment's producers again."""
    if not dedup:
        return lambda sp, rows: sp.append(rows)
    from a3m.spark.idempotent import Deduplicator

    seen = Deduplicator(spool.dir / "dedup.json")

    def keep(sp: Spool, rows: dict[str, Any]) -> None:
        kept: list[int] = []
        payloads = rows["payload"]
        for i, message in enumerate(payloads):
            try:
                got = seen.accept(message)
            except ValueError:
                got = message  # not from an idempotent sink: kept as it came
            if got is not None:
                payloads[i] = got
                kept.append(i)
        if kept and len(kept) < len(payloads):
            rows = {k: ([v[i] for i in kept] if isinstance(v, list) else v.take(kept))
                    for k, v in rows.items()}
        if kept:
            sp.append(rows)
        seen.save()

    return keep


def _serve(args: argparse.Namespace, spool: Spool, sock: Any, stopping: Any,
           keep: Keep) -> None:
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
            if args.idle_timeout > 0 and idle > args.idle_timeout:
                return
        if spool.pending() >= args.max_pending:
            time.sleep(0.05)  # Spark is behind: leave messages in the socket (credits)
            continue
        rows = _take(sock, args.batch_rows, batch_s, a3m)
        if rows["payload"]:
            keep(spool, rows)


def _take(sock: Any, limit: int, window_s: float, a3m: Any) -> dict[str, Any]:
    """What the socket delivers within ``window_s`` (at most ``limit`` messages), as spool
    columns, taken in runs of one link's messages (one lock and one credit hand-off per
    take); ``received_at`` is read once per take."""
    import pyarrow as pa

    nodes: list[str] = []
    sockets: list[str] = []
    topics: list[bytes | None] = []
    payloads: list[bytes] = []
    stamps: list[int] = []
    deadline = time.monotonic() + window_s
    while len(payloads) < limit:
        left = deadline - time.monotonic()
        try:
            runs = sock._recv_runs(limit - len(payloads),
                                   max(0.0, left) if payloads else window_s)
        except (a3m.Timeout, a3m.WouldBlock, a3m.Closed):
            break
        stamp = time.time_ns() // 1000
        for (node, tag), topic, got in runs:
            k = len(got)
            nodes += [node] * k
            sockets += [tag] * k
            topics += [topic] * k
            payloads += got
            stamps += [stamp] * k
        if left <= 0:
            break
    return {"node": nodes, "socket": sockets, "topic": topics, "payload": payloads,
            "received_at": pa.array(stamps, pa.timestamp("us", tz="UTC"))}


def _drain(spool: Spool, sock: Any, limit: int, keep: Keep) -> None:
    import a3m

    while True:
        rows = _take(sock, limit, 0.0, a3m)
        if not rows["payload"]:
            return
        keep(spool, rows)


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
    return ensure_all([(spool_dir, cmd_args, config)], wait_s)[0]


def ensure_all(collectors: list[tuple[str | os.PathLike[str], list[str],
                                      dict[str, str] | None]],
               wait_s: float = 30.0) -> list[dict[str, Any]]:
    """:func:`ensure_running` for several spools (a partitioned source): every missing
    collector is started first, then all are waited for together."""
    infos: list[dict[str, Any] | None] = []
    for spool_dir, cmd_args, config in collectors:
        d = Path(spool_dir)
        d.mkdir(parents=True, exist_ok=True)
        _touch(d / HEARTBEAT)
        info = running(d)
        if info is not None:
            theirs = info.get("config")
            if config is not None and theirs != config:
                raise CollectorMismatch(
                    f"the spool {d} is served by a collector started with {theirs}; this "
                    f"query asks for {config}. Give each source its own spool (or stop that "
                    f"collector: a3m.spark.collector.stop({str(d)!r})).")
        else:
            with open(d / LOG, "ab") as log:
                subprocess.Popen(
                    [sys.executable, "-m", "a3m.spark.collector", "--spool", str(d),
                     *cmd_args],
                    stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True,
                    close_fds=True)
        infos.append(info)
    deadline = time.monotonic() + wait_s
    for k, (spool_dir, _, _) in enumerate(collectors):
        while infos[k] is None:
            infos[k] = running(spool_dir)
            if infos[k] is not None:
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"the A3M collector for {spool_dir} did not start in "
                                   f"{wait_s} s (see {Path(spool_dir) / LOG})")
            time.sleep(0.05)
    return [i for i in infos if i is not None]


def running(spool_dir: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The info of the collector serving ``spool_dir`` if it is alive, else None.

    (Probing the lock itself could make a collector that is starting lose it.)"""
    try:
        info: dict[str, Any] = json.loads((Path(spool_dir) / INFO).read_text())
        cmdline = Path(f"/proc/{int(info['pid'])}/cmdline").read_bytes()
    except (FileNotFoundError, ProcessLookupError, json.JSONDecodeError, KeyError, ValueError):
        return None
    ours = b"a3m.spark.collector" in cmdline or b"\0collect\0" in cmdline  # a3m collect
    return info if ours else None


def heartbeat(spool_dir: str | os.PathLike[str]) -> None:
    _touch(Path(spool_dir) / HEARTBEAT)


def stop(spool_dir: str | os.PathLike[str], timeout: float = 30.0) -> bool:
    """Ask the collector of ``spool_dir`` (and those of its ``part-*`` partitions, for a
    partitioned source's root) to exit cleanly; True once all have."""
    root = Path(spool_dir)
    dirs = [root, *sorted(root.glob(f"{PART_PREFIX}*"))] if root.is_dir() else [root]
    live = [d for d in dirs if running(d) is not None]
    for d in live:
        (d / STOP).touch()
    deadline = time.monotonic() + timeout
    while any(running(d) is not None for d in live):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


if __name__ == "__main__":
    sys.exit(main())
