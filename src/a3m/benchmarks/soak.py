"""``a3m bench soak --minutes M``: a long run that must stay flat and exact (issue 40).

Processes, all on loopback, every datagram through the lossy relay (:class:`FaultRelay`, in
this process):

- ``tx``: node ``soak-tx``: a PUSH stream at a steady rate (``--rate``) into ``soak-rx``'s
  PULL, a REQ/REP round trip per batch of ``--batch`` messages, link churn (every
  ``--churn-s`` a PUSH is made, linked, sends a few messages and is closed), and a second
  PUSH stream into ``soak-rx2`` (the receiver that is restarted). Every message carries a
  cookie: its outcome is how it is accounted for.
- ``rx``: node ``soak-rx``: the PULL, the REP and the churn PULL, for the whole run.
- ``rx2``: node ``soak-rx2`` (its key kept in a state directory, its port kept): a PULL that
  kills itself (SIGKILL, right after writing down what it took) every ``--restart-s`` and is
  started again under the same id: the restart leaves messages of unknown outcome, which the
  sender hears (``peer_restarted``) and counts.

Each process samples itself every ``--sample-s`` (RSS, open descriptors, threads, its node's
tables). The accounting: every message sent was delivered once (taken, and its cookie says
DELIVERED), or reported UNKNOWN (a restart hid the answer) or NOT_DELIVERED (never taken);
``lost`` counts the rest (a DELIVERED never taken, a NOT_DELIVERED taken, no outcome by the
end) and ``duplicates`` messages taken twice. The JSON holds per process the samples and
``growth_mib_per_h`` (RSS, least squares over the samples after the first 5 minutes, or the
first third of a shorter run).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import signal
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

Progress = Callable[[str], None]

#: Messages a churned PUSH sends before it closes.
CHURN_MESSAGES = 5
#: The sender's stream to the restarted receiver runs at this share of ``--rate``.
RX2_SHARE = 0.2


# ------------------------------------------------------------------------------ sampling

def sample_process(pid: int | str = "self") -> dict[str, float]:
    """RSS (MiB), open descriptors and threads of a process, from /proc."""
    status = Path(f"/proc/{pid}/status").read_text()
    fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
    rss_kib = int(fields["VmRSS"].split()[0])
    return {"rss_mib": round(rss_kib / 1024, 3), "fds": len(os.listdir(f"/proc/{pid}/fd")),
            "threads": int(fields["Threads"])}


class Sampler:
    """Appends a JSON line (its time, /proc figures, the node's tables) to ``path`` every
    ``every_s``, from a thread of its own; the first at once."""

    def __init__(self, path: Path, every_s: float, node: Any, t0: float, role: str) -> None:
        self.path, self.every_s, self.node, self.t0, self.role = path, every_s, node, t0, role
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="a3m-soak-sampler", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while True:
            self.sample()
            if self._stop.wait(self.every_s):
                return

    def sample(self) -> None:
        row: dict[str, Any] = {"t": round(time.time() - self.t0, 2), "pid": os.getpid(),
                               "role": self.role, **sample_process()}
        try:
            row["tables"] = self.node.stats["tables"]
        except Exception:  # (closing)
            pass
        _append(self.path, row)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)


def _append(path: Path, row: dict[str, Any]) -> None:
    """One JSON line, written with one system call (a killed process leaves whole lines)."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, (json.dumps(row) + "\n").encode())
    finally:
        os.close(fd)


def _read_lines(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    rows = []
    for line in path.read_text().splitlines():
        try:
            rows.append(json.loads(line))
        except ValueError:
            continue  # (a line cut by a kill)
    return rows


# ------------------------------------------------------------------------------ processes

def _receiver(role: str, node_id: str, port: int, work: str, params: dict[str, Any],
              ready: Any) -> None:
    """``rx`` or ``rx2``: take everything, write down each id taken (``taken-<role>``), answer
    the REP; ``rx2`` kills itself after ``restart_s``; both stop at the ``stop`` file."""
    os.environ["A3M_STATE_DIR"] = os.path.join(work, "state")
    import a3m

    t0 = params["t0"]
    wd = Path(work)
    node = a3m.Node(node_id, bind=f"127.0.0.1:{port}")
    sampler = Sampler(wd / f"samples-{role}.jsonl", params["sample_s"], node, t0, role)
    pull = node.socket(a3m.PULL, "sink")
    socks = [pull]
    if role == "rx":
        rep = node.socket(a3m.REP, "rpc")
        churn = node.socket(a3m.PULL, "churn")
        socks += [rep, churn]
    poller = a3m.Poller()
    for s in socks:
        poller.register(s, a3m.POLLIN)
    ready.put(node.address)
    log = os.open(wd / f"taken-{role}", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    dies_at = time.monotonic() + params["restart_s"] if role == "rx2" else float("inf")
    stop = wd / "stop"
    told = 0
    while not stop.exists():
        told += sum(1 for _ in node.events(timeout=0))  # read, as an application would
        for sock, _ in poller.poll(0.2):
            if role == "rx" and sock is socks[1]:
                req = sock.recv(timeout=0)
                sock.send(req, timeout=30)
                continue
            try:
                got = sock.recv_many(512, timeout=0)
            except a3m.WouldBlock:
                continue
            if got:
                os.write(log, b"".join(m + b"\n" for m in got))  # before anything else
        if time.monotonic() >= dies_at and time.time() < t0 + params["duration_s"] - 20:
            os.kill(os.getpid(), signal.SIGKILL)  # a crash, right after writing down
    sampler.stop()
    os.close(log)
    node.close(timeout=10)


def _sender(work: str, params: dict[str, Any], addrs: dict[str, tuple[str, int]]) -> None:
    """``tx``: the streams, the round trips, the churn; its report in ``report-tx.json``."""
    os.environ["A3M_STATE_DIR"] = os.path.join(work, "state")
    import a3m

    wd = Path(work)
    t0 = params["t0"]
    end = time.monotonic() + params["duration_s"]
    node = a3m.Node("soak-tx")
    for name, addr in addrs.items():
        node.associate(name, addr)
    sampler = Sampler(wd / "samples-tx.jsonl", params["sample_s"], node, t0, "tx")
    lock = threading.Lock()
    outcomes: Counter[str] = Counter()
    # Each outcome is written down as it comes (kept in memory, 720 000 an hour would be
    # the process's own growth, not the node's).
    record = os.open(wd / "outcomes-tx", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    sent: list[int] = [0]
    tally = {"rpc_ok": 0, "rpc_failed": 0, "churn_links": 0, "churn_failed": 0}

    def note(cookies: list[Any]) -> None:
        if not cookies:
            return
        with lock:
            for c in cookies:
                outcomes[c.outcome] += 1
            os.write(record, b"".join(b"%s %s\n" % (c.value, c.outcome[:1].encode())
                                      for c in cookies))

    counts: dict[str, int] = {}

    def stream(peer: str, prefix: bytes, rate: float, rpc: bool) -> None:
        push = node.socket(a3m.PUSH, prefix.decode())
        push.link(f"{peer}/sink")
        req = None
        if rpc:
            req = node.socket(a3m.REQ, "rpc")
            req.link(f"{peer}/rpc")
        i = 0
        period = 1.0 / rate
        nxt = time.monotonic()
        while time.monotonic() < end:
            mid = b"%s%d" % (prefix, i)
            try:
                push.send(mid, cookie=mid, timeout=0.5)
            except (a3m.Timeout, a3m.WouldBlock):
                note(push.cookies(4096))
                continue  # not sent: the same id again
            i += 1
            with lock:
                sent[0] += 1
            if i % 256 == 0:
                note(push.cookies(4096))
            if req is not None and i % params["batch"] == 0:
                try:
                    req.send(b"rt%d" % i, timeout=10)
                    ok = req.recv(timeout=10) == b"rt%d" % i
                except (a3m.A3MError, TimeoutError):
                    ok = False
                tally["rpc_ok" if ok else "rpc_failed"] += 1
            nxt += period
            delay = nxt - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            elif delay < -1.0:
                nxt = time.monotonic()  # fell behind (a peer away): no burst to catch up
        counts[prefix.decode()] = i
        push.close(timeout=30)  # waits for the outcomes still owed
        note(push.cookies(1 << 30))
        if req is not None:
            req.close(timeout=5)

    def churn() -> None:
        n = 0
        while time.monotonic() < end:
            push = node.socket(a3m.PUSH, "churn")
            push.link("soak-rx/churn")
            try:
                if push.wait_linked(timeout=10):
                    tally["churn_links"] += 1
                    for _ in range(CHURN_MESSAGES):
                        mid = b"c%d" % n
                        push.send(mid, cookie=mid, timeout=10)
                        n += 1
                        with lock:
                            sent[0] += 1
                    # Used: its messages taken before it closes (closed at once, the PULL's
                    # unread ones would come back NOT_DELIVERED, as they should).
                    note([push.recv_cookie(timeout=10) for _ in range(CHURN_MESSAGES)])
                else:
                    tally["churn_failed"] += 1
            except (a3m.A3MError, TimeoutError):
                tally["churn_failed"] += 1
            push.close(timeout=30)
            note(push.cookies(1 << 30))
            counts["c"] = n
            time.sleep(params["churn_s"])

    threads = [threading.Thread(target=stream, args=("soak-rx", b"s", params["rate"], True)),
               threading.Thread(target=stream, args=("soak-rx2", b"r",
                                                     max(1.0, params["rate"] * RX2_SHARE),
                                                     False)),
               threading.Thread(target=churn)]
    for t in threads:
        t.start()
    restarts: list[dict[str, Any]] = []

    def hear(timeout: float) -> None:
        for ev in node.events(timeout=timeout):  # (ends after `timeout` without one)
            if ev.kind in ("peer_restarted", "peer_unreachable"):
                restarts.append({"t": round(ev.time - t0, 2), "peer": ev.peer.node,
                                 "kind": ev.kind, "unknown": ev.unknown})

    while any(t.is_alive() for t in threads):
        hear(0.5)
    hear(0)
    sampler.sample()
    sampler.stop()
    stats = node.stats
    node.close(timeout=30)
    os.close(record)
    report = {"sent": sent[0], "outcomes": dict(outcomes),
              "restarts_heard": restarts, "counts": counts, **tally,
              "peers_restarted": stats["peers_restarted"], "events": stats["events"]}
    (wd / "report-tx.json").write_text(json.dumps(report))


# ------------------------------------------------------------------------------ the run

def growth_mib_per_h(samples: list[dict[str, Any]], warmup_s: float) -> float | None:
    """The least-squares slope of RSS after ``warmup_s``, in MiB an hour (None: too few)."""
    pts = [(s["t"], s["rss_mib"]) for s in samples if s["t"] >= warmup_s]
    if len(pts) < 3:
        return None
    n = len(pts)
    mt = sum(t for t, _ in pts) / n
    mr = sum(r for _, r in pts) / n
    var = sum((t - mt) ** 2 for t, _ in pts)
    if var == 0:
        return None
    slope = sum((t - mt) * (r - mr) for t, r in pts) / var  # MiB per second
    return round(slope * 3600, 3)


def _spread(samples: list[dict[str, Any]], key: str, warmup_s: float) -> list[float]:
    vals = [s[key] for s in samples if s["t"] >= warmup_s]
    return [min(vals), max(vals)] if vals else []


def run_soak(minutes: float, rate: float = 200.0, batch: int = 100, churn_s: float = 3.0,
             restart_s: float = 180.0, sample_s: float = 30.0, loss: float = 0.01,
             dup: float = 0.005, reorder: float = 0.02, seed: int = 1,
             progress: Progress = lambda _: None, work: str | None = None) -> dict[str, Any]:
    from a3m.benchmarks.registry import machine
    from a3m.testing.relay import FaultRelay

    duration = minutes * 60.0
    warmup = min(300.0, duration / 3)
    wd = Path(work or tempfile.mkdtemp(prefix="a3m-soak-"))
    (wd / "state").mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    params = {"t0": t0, "duration_s": duration, "rate": rate, "batch": batch,
              "churn_s": churn_s, "restart_s": restart_s, "sample_s": sample_s}
    ctx = mp.get_context("spawn")
    ready: Any = ctx.Queue()
    rx = ctx.Process(target=_receiver, args=("rx", "soak-rx", 0, str(wd), params, ready),
                     daemon=True)
    rx.start()
    rx_addr = tuple(ready.get(timeout=60))
    rx2 = ctx.Process(target=_receiver, args=("rx2", "soak-rx2", 0, str(wd), params, ready),
                      daemon=True)
    rx2.start()
    rx2_addr = tuple(ready.get(timeout=60))
    relay = FaultRelay({"rx": rx_addr, "rx2": rx2_addr}, loss=loss, dup=dup, reorder=reorder,
                       seed=seed)
    addrs = {"soak-rx": relay.front("rx"), "soak-rx2": relay.front("rx2")}
    progress(f"soak: {minutes} min, {rate:g} msg/s, loss {loss}, dup {dup}, reorder "
             f"{reorder}, a restart every {restart_s:g} s, churn every {churn_s:g} s; in {wd}")
    tx = ctx.Process(target=_sender, args=(str(wd), params, addrs), daemon=True)
    tx.start()
    if threading.current_thread() is threading.main_thread():
        # Killed (SIGTERM): the processes end with it (below), not left running.
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    incarnations = 1
    try:
        last_said = time.monotonic()
        while tx.is_alive():
            tx.join(0.5)
            if not rx2.is_alive() and tx.is_alive() and time.time() - t0 < duration:
                rx2.join()
                rx2 = ctx.Process(target=_receiver, daemon=True,
                                  args=("rx2", "soak-rx2", rx2_addr[1], str(wd), params, ready))
                rx2.start()
                ready.get(timeout=60)
                incarnations += 1
            if time.monotonic() - last_said >= 60:
                last_said = time.monotonic()
                progress(f"soak: {(time.time() - t0) / 60:.1f} of {minutes} min, "
                         f"{incarnations} incarnation(s) of soak-rx2")
        tx.join()
    except BaseException:
        for p in (rx, rx2, tx):
            p.kill()
        raise
    finally:
        (wd / "stop").touch()
        for p in (rx, rx2, tx):
            p.join(30)
            if p.is_alive():
                p.kill()
        relay.close()
    report = json.loads((wd / "report-tx.json").read_text())
    taken: Counter[str] = Counter()
    for role in ("rx", "rx2"):
        path = wd / f"taken-{role}"
        if path.exists():
            taken.update(line for line in path.read_text().splitlines() if line)
    by_id: dict[str, str] = {}
    outcome_of = {"d": "delivered", "u": "unknown", "n": "not delivered"}
    repeated = 0  # two outcomes for one message (never: exactly one each)
    for line in (wd / "outcomes-tx").read_text().splitlines():
        mid, _, o = line.partition(" ")
        if mid in by_id:
            repeated += 1
        by_id[mid] = outcome_of.get(o, o)
    lost = [m for m, o in by_id.items() if (o == "delivered" and m not in taken)
            or (o == "not delivered" and m in taken)]
    unresolved = report["sent"] - len(by_id)
    duplicates = sum(c - 1 for c in taken.values() if c > 1)
    counts = report["counts"]
    phantoms = sum(1 for m in taken
                   if not (m[:1] in counts and m[1:].isdigit() and int(m[1:]) < counts[m[:1]]))
    outcomes = report["outcomes"]
    processes: dict[str, Any] = {}
    for role in ("tx", "rx", "rx2"):
        samples = _read_lines(wd / f"samples-{role}.jsonl")
        entry: dict[str, Any] = {"samples": samples}
        if role != "rx2":
            entry["growth_mib_per_h"] = growth_mib_per_h(samples, warmup)
            for key in ("rss_mib", "fds", "threads"):
                entry[f"{key}_range"] = _spread(samples, key, warmup)
        else:
            entry["incarnations"] = incarnations
        processes[role] = entry
    unknown_heard = sum(r["unknown"] for r in report["restarts_heard"])
    by_stream: dict[str, Counter[str]] = {}
    for m, o in by_id.items():
        by_stream.setdefault(m[:1], Counter())[o] += 1
    result = {
        "workload": "soak", "minutes": minutes, "rate": rate, "loss": loss, "dup": dup,
        "reorder": reorder, "restart_s": restart_s, "churn_s": churn_s, "sample_s": sample_s,
        "warmup_s": warmup,
        "sent": report["sent"], "delivered": outcomes.get("delivered", 0),
        "unknown": outcomes.get("unknown", 0),
        "not_delivered": outcomes.get("not delivered", 0),
        "lost": len(lost) + unresolved, "unresolved": unresolved, "duplicates": duplicates,
        "outcomes_repeated": repeated,
        "phantoms": phantoms, "lost_examples": lost[:10],
        "restarts": incarnations - 1,
        "restarts_heard": [r for r in report["restarts_heard"] if r["kind"] == "peer_restarted"],
        "unreachable_heard": [r for r in report["restarts_heard"]
                              if r["kind"] == "peer_unreachable"],
        "unknown_heard": unknown_heard,
        "outcomes_by_stream": {{"s": "stream", "r": "restarted", "c": "churn"}.get(k, k):
                               dict(v) for k, v in sorted(by_stream.items())},
        "rpc_ok": report["rpc_ok"], "rpc_failed": report["rpc_failed"],
        "churn_links": report["churn_links"], "churn_failed": report["churn_failed"],
        "events": report["events"],
        "processes": {k: v for k, v in processes.items()},
        "growth_mib_per_h": {k: v["growth_mib_per_h"] for k, v in processes.items()
                             if "growth_mib_per_h" in v},
        "machine": machine(),
    }
    result["exact"] = (result["lost"] == 0 and duplicates == 0 and phantoms == 0
                       and repeated == 0
                       and result["delivered"] + result["unknown"] + result["not_delivered"]
                       == result["sent"])
    return result


def plot(result: dict[str, Any], path: str) -> None:
    """RSS, descriptors and threads of each process over the run."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(3, 1, figsize=(9, 8), sharex=True)
    for role, entry in result["processes"].items():
        samples = entry["samples"]
        if role == "rx2":  # one line per incarnation
            by_pid: dict[int, list[dict[str, Any]]] = {}
            for s in samples:
                by_pid.setdefault(s["pid"], []).append(s)
            runs = list(by_pid.values())
        else:
            runs = [samples]
        for i, run in enumerate(runs):
            ts = [s["t"] / 60 for s in run]
            for ax, key in zip(axes, ("rss_mib", "fds", "threads"), strict=True):
                ax.plot(ts, [s[key] for s in run], marker=".",
                        label=role if i == 0 else None,
                        color={"tx": "C0", "rx": "C1", "rx2": "C2"}[role])
    for ax, label in zip(axes, ("RSS (MiB)", "open descriptors", "threads"), strict=True):
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
    axes[0].legend()
    axes[0].set_title(f"a3m bench soak: {result['minutes']} min, sent {result['sent']:,}, "
                      f"lost {result['lost']}, growth {result['growth_mib_per_h']} MiB/h")
    axes[-1].set_xlabel("minutes")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


# ------------------------------------------------------------------------------ command line

def add_options(p: argparse.ArgumentParser) -> None:
    """``a3m bench soak``'s options."""
    p.add_argument("--minutes", type=float, default=60.0, help="how long (default 60)")
    p.add_argument("--rate", type=float, default=200.0,
                   help="messages a second of the main stream (default 200)")
    p.add_argument("--batch", type=int, default=100,
                   help="a REQ/REP round trip every this many messages (default 100)")
    p.add_argument("--churn-s", type=float, default=3.0,
                   help="a PUSH made, linked, used and closed this often (default 3)")
    p.add_argument("--restart-s", type=float, default=180.0,
                   help="the restarted receiver lives this long (default 180)")
    p.add_argument("--sample-s", type=float, default=30.0,
                   help="each process samples itself this often (default 30)")
    p.add_argument("--loss", type=float, default=0.01, help="the relay's loss (default 0.01)")
    p.add_argument("--dup", type=float, default=0.005, help="duplication (default 0.005)")
    p.add_argument("--reorder", type=float, default=0.02, help="reordering (default 0.02)")
    p.add_argument("--workdir", default=None, help="where the processes write (default: a "
                   "new temporary directory)")


def cli(args: argparse.Namespace) -> int:
    """``a3m bench soak``."""
    if args.minutes <= 0 or args.rate <= 0 or args.batch < 1 or args.sample_s <= 0 \
            or args.restart_s <= 0 or args.churn_s < 0:
        print("a3m bench: need --minutes, --rate, --sample-s, --restart-s > 0, --batch >= 1 "
              "and --churn-s >= 0", file=sys.stderr)
        return 2
    result = run_soak(args.minutes, args.rate, args.batch, args.churn_s, args.restart_s,
                      args.sample_s, args.loss, args.dup, args.reorder,
                      progress=lambda m: print(f"[bench] {m}", file=sys.stderr, flush=True),
                      work=args.workdir)
    indent = None if args.json else 2
    if args.plot:
        plot(result, args.plot)
        result["plot"] = args.plot
    text = json.dumps(result, indent=indent)
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=indent) + "\n")
    if args.json:
        print(text)
    else:
        print(json.dumps({k: v for k, v in result.items() if k not in ("processes",)},
                         indent=2), file=sys.stderr)
    return 0 if result["exact"] else 1


__all__ = ["run_soak", "growth_mib_per_h", "sample_process", "plot", "add_options", "cli"]
