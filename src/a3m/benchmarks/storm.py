"""``a3m bench storm``: a secure stream while an attacker on the same host floods the receiver.

A PUSH node streams numbered 64-byte messages to a PULL node (separate processes, 1400-byte
datagrams, as across a real network); a third process sends the receiver garbage datagrams
from 254 source addresses on 127.0.0.0/8 at a fixed rate, each mix in turn:

- ``random``: random bytes, 16 to 1400 of them;
- ``hello``: HELLOs (256 B, fresh ephemeral keys and indexes, no token);
- ``initiate``: INITIATEs with forged cookies;
- ``sealed``: sealed DATA under made-up session indexes;
- ``mixed``: the four in equal shares.

Each run reports the stream's rate as a share of the quiet rate (the same stream with no
attacker, measured right before it in the same invocation), and the same share by the
receiver's CPU: its CPU time per message quiet over the same under the storm, what the rate
share would be for a receiver with a CPU of its own (the wall-clock share moves with
whatever else the machine runs; the CPU share much less), whether it arrived exactly once (the receiver
audits every sequence number), the receiver's memory growth (the highest RSS over the RSS
at the first message, sampled during the stream), the datagrams the kernel dropped for its
socket, and reflection: the bytes the attacker's 254 addresses received back per byte they
sent. ``elsewhere`` runs aim the same storm at another UDP port of the host: what is left of
the rate then is the attacker's own CPU, not the node's handling.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import queue
import random
import resource
import socket
import time
from typing import Any

from a3m.benchmarks.procs import WorkerFailed, cpus_for
from a3m.benchmarks.registry import Progress, machine
from a3m.benchmarks.transport import SEQ

MIXES = ("random", "hello", "initiate", "sealed", "mixed")
#: Source addresses of the attacker (127.0.0.2 .. 127.0.0.255).
SOURCES = 254
_POOL = 4096  # distinct garbage datagrams per mix, cycled


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _cpu_s() -> float:
    """CPU seconds this process used so far (every thread, user and system)."""
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def _udp_drops(port: int) -> int | None:
    """Datagrams the kernel dropped for the UDP socket bound to ``port`` (its receive buffer
    was full), from /proc/net/udp; None where that is not available."""
    try:
        with open("/proc/net/udp") as f:
            next(f)
            for line in f:
                cols = line.split()
                if int(cols[1].rsplit(":", 1)[1], 16) == port:
                    return int(cols[-1])
    except (OSError, ValueError, IndexError, StopIteration):
        return None
    return None


def storm_receiver(ready: Any, results: Any, messages: int, size: int, **_: Any) -> None:
    import a3m

    try:
        with a3m.Node("storm-rx", loopback_datagram_size=0) as node:
            pull = node.socket(a3m.PULL, "sink", capacity=4096)
            ready.put(node.address)
            port = node.address[1]
            seen = bytearray(messages)
            dups = phantoms = got = 0
            first_t = cpu0 = 0.0
            rss0 = peak = 0
            drops0 = _udp_drops(port)
            while got < messages:
                payload = pull.recv(timeout=600)
                if not first_t:
                    first_t = time.perf_counter()
                    cpu0 = _cpu_s()
                    rss0 = peak = _rss_bytes()
                got += 1
                if not got & 0x3FFF:
                    peak = max(peak, _rss_bytes())
                n = SEQ.unpack_from(payload)[0]
                if 0 <= n < messages:
                    dups += seen[n]
                    seen[n] = 1
                else:
                    phantoms += 1
            last_t = time.perf_counter()
            cpu = _cpu_s() - cpu0
            end = time.monotonic() + 0.5  # a duplicate would arrive now
            while time.monotonic() < end:
                try:
                    n = SEQ.unpack_from(pull.recv(timeout=0.1))[0]
                except a3m.Timeout:
                    continue
                got += 1
                if 0 <= n < messages:
                    dups += seen[n]
                else:
                    phantoms += 1
            peak = max(peak, _rss_bytes())
            drops1 = _udp_drops(port)
            stats = node.stats["exon"]
        results.put({"side": "receiver", "received": got,
                     "kernel_drops": (None if drops0 is None or drops1 is None
                                      else drops1 - drops0),
                     "msgs_per_s": (messages - 1) / (last_t - first_t),
                     "cpu_us_per_msg": cpu / (messages - 1) * 1e6,
                     "lost": messages - sum(seen), "duplicates": dups, "phantoms": phantoms,
                     "rss_mib": round(rss0 / 2**20, 1),
                     "rss_growth_mib": round((peak - rss0) / 2**20, 1),
                     "stats": stats})
    except Exception as exc:
        results.put({"side": "receiver", "error": repr(exc)})


def storm_sender(address: Any, results: Any, messages: int, size: int, **_: Any) -> None:
    import a3m

    try:
        with a3m.Node("storm-tx", loopback_datagram_size=0) as node:
            node.associate("storm-rx", tuple(address))
            push = node.socket(a3m.PUSH, "source")
            push.link("storm-rx/sink")
            if not push.wait_linked(timeout=60):
                raise RuntimeError("could not link to storm-rx/sink")
            pad = b"p" * max(0, size - SEQ.size)
            t0 = time.perf_counter()
            for i in range(messages):
                push.send(SEQ.pack(i) + pad, timeout=120)
            clean = push.close(timeout=120)
            stats = node.stats["exon"]
        results.put({"side": "sender", "send_s": time.perf_counter() - t0,
                     "closed_clean": clean, "stats": stats})
    except Exception as exc:
        results.put({"side": "sender", "error": repr(exc)})


def garbage(mix: str, rng: random.Random, count: int = _POOL) -> list[bytes]:
    """``count`` datagrams of one mix (see the module's docstring)."""
    from a3m.exon.secure import packets as p

    rb = rng.randbytes

    def one(kind: str) -> bytes:
        if kind == "random":
            return rb(rng.randint(16, 1400))
        if kind == "hello":
            head = p.HELLO_HDR.pack(p.VERSION, p.HELLO, 0) + rb(36)
            return head + bytes(p.HELLO_SIZE - len(head))
        if kind == "initiate":  # e (32), a forged cookie (72), message 3 (48 + 16 + 8 + id)
            return (p.INITIATE_HDR.pack(p.VERSION, p.INITIATE, rng.getrandbits(32))
                    + rb(32 + 72 + 48 + 16 + 8 + 9))
        if kind == "sealed":  # a made-up index and counter, a 64-byte message's worth
            return (p.SEALED_HDR.pack(p.VERSION, p.DATA, rng.getrandbits(32),
                                      rng.getrandbits(40)) + rb(13 + 84 + 16))
        raise ValueError(kind)

    kinds = ("random", "hello", "initiate", "sealed") if mix == "mixed" else (mix,)
    return [one(kinds[i % len(kinds)]) for i in range(count)]


def attacker(target: tuple[str, int], rate: float, mix: str, ready: Any, stop: Any,
             results: Any) -> None:
    """Send ``rate`` datagrams a second of ``mix`` to ``target`` from 254 addresses, in 1 ms
    steps, until ``stop`` is set; count what comes back to those addresses."""
    try:
        rng = random.Random(7)
        pool = garbage(mix, rng)
        socks = []
        for i in range(SOURCES):
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            s.bind((f"127.0.0.{2 + i}", 0))
            s.setblocking(False)
            socks.append(s)
        sent = sent_bytes = back = back_bytes = errors = 0
        buf = bytearray(65536)
        ready.put(True)
        t0 = time.perf_counter()
        k = 0
        while not stop.is_set():
            due = int((time.perf_counter() - t0) * rate)
            if due - sent > rate:  # more than a second behind: the CPU cannot keep up
                sent = due - int(rate)
            while sent < due:
                d = pool[k % _POOL]
                try:
                    socks[k % SOURCES].sendto(d, target)
                    sent_bytes += len(d)
                except OSError:
                    errors += 1
                sent += 1
                k += 1
            for s in socks[(k // 64) % 4::4]:  # look at a quarter of them per step
                while True:
                    try:
                        n = s.recv_into(buf)
                    except OSError:
                        break
                    back += 1
                    back_bytes += n
            time.sleep(0.001)
        elapsed = time.perf_counter() - t0
        time.sleep(0.05)
        for s in socks:
            while True:
                try:
                    n = s.recv_into(buf)
                except OSError:
                    break
                back += 1
                back_bytes += n
            s.close()
        results.put({"side": "attacker", "sent": k, "sent_bytes": sent_bytes,
                     "rate": round(k / elapsed), "back": back, "back_bytes": back_bytes,
                     "send_errors": errors})
    except Exception as exc:
        results.put({"side": "attacker", "error": repr(exc)})


def _pinned(fn: Any, cpus: set[int] | None, *args: Any, **kwargs: Any) -> None:
    if cpus:
        os.sched_setaffinity(0, cpus)
    fn(*args, **kwargs)


def run_once(messages: int, size: int, rate: float, mix: str, elsewhere: bool,
             placement: str, timeout: float = 300.0) -> dict[str, Any]:
    """One stream; with ``rate`` > 0, under a storm at the receiver (or, ``elsewhere``, at a
    port nobody reads)."""
    ctx = mp.get_context("spawn")
    ready: Any = ctx.Queue()
    results: Any = ctx.Queue()
    stop = ctx.Event()
    rx_cpus, tx_cpus = cpus_for(placement)
    params = {"messages": messages, "size": size}
    rx = ctx.Process(target=_pinned, args=(storm_receiver, rx_cpus, ready, results),
                     kwargs=params, daemon=True)
    rx.start()
    procs = [rx]
    sink: socket.socket | None = None
    try:
        try:
            address = tuple(ready.get(timeout=60))
        except queue.Empty as exc:
            raise WorkerFailed("storm receiver did not start") from exc
        if rate > 0:
            target = address
            if elsewhere:  # a bound port that nobody reads: the kernel takes and drops them
                sink = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
                sink.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
                sink.bind((address[0], 0))
                target = sink.getsockname()
            att = ctx.Process(target=attacker, args=(target, rate, mix, ready, stop, results),
                              daemon=True)
            att.start()
            procs.append(att)
            ready.get(timeout=60)
            time.sleep(0.3)  # the storm is on before the stream links
        tx = ctx.Process(target=_pinned, args=(storm_sender, tx_cpus, address, results),
                         kwargs=params, daemon=True)
        tx.start()
        procs.append(tx)
        reports: dict[str, dict[str, Any]] = {}
        try:
            while "receiver" not in reports or "sender" not in reports:
                rep = results.get(timeout=timeout)
                reports[rep["side"]] = rep
            stop.set()
            if rate > 0:
                rep = results.get(timeout=30)
                reports[rep["side"]] = rep
        except queue.Empty as exc:
            raise WorkerFailed("storm run timed out") from exc
        for rep in reports.values():
            if "error" in rep:
                raise WorkerFailed(f"{rep['side']}: {rep['error']}")
    finally:
        stop.set()
        for pr in procs:
            pr.join(timeout=10)
            if pr.is_alive():
                pr.kill()
        if sink is not None:
            sink.close()
    r, s = reports["receiver"], reports["sender"]
    st = r["stats"]
    out: dict[str, Any] = {
        "rate_asked": rate, "mix": mix if rate else None, "elsewhere": elsewhere,
        "msgs_per_s": round(r["msgs_per_s"]),
        "rx_cpu_us_per_msg": round(r["cpu_us_per_msg"], 3),
        "exact": r["lost"] == 0 and r["duplicates"] == 0 and r["phantoms"] == 0,
        "lost": r["lost"], "duplicates": r["duplicates"], "phantoms": r["phantoms"],
        "rss_mib": r["rss_mib"], "rss_growth_mib": r["rss_growth_mib"],
        "closed_clean": s["closed_clean"], "kernel_drops": r["kernel_drops"],
        "receiver": {k: st.get(k) for k in (
            "datagrams_in", "datagrams_out", "malformed", "truncated", "unknown_session",
            "forged", "cookie_invalid", "retries_sent", "hellos_answered", "unauth_shed",
            "handshakes_shed", "data_first")},
        "sender_retransmits": s["stats"].get("retransmits"),
    }
    if rate > 0:
        a = reports["attacker"]
        out.update(storm_rate=a["rate"], storm_sent=a["sent"],
                   reflection=round(a["back_bytes"] / max(1, a["sent_bytes"]), 4),
                   back_datagrams=a["back"])
    return out


def run_storm(messages: int, size: int, rates: list[float], mixes: list[str],
              elsewhere: bool = True, placement: str = "spread",
              progress: Progress = lambda _: None) -> dict[str, Any]:
    """One run per rate and mix (and per rate, ``elsewhere``), each right after a quiet run
    of the same stream: its share of the quiet rate is taken against that neighbour, so a
    machine whose load changes over the minutes of the benchmark moves both alike."""
    t0 = time.perf_counter()
    plan = [(rate, mix, False) for rate in rates for mix in mixes]
    if elsewhere:
        plan += [(rate, mixes[-1], True) for rate in rates]
    quiet: list[dict[str, Any]] = []
    runs: list[dict[str, Any]] = []
    for rate, mix, away in plan:
        progress(f"storm: quiet stream, {messages} x {size} B")
        q = run_once(messages, size, 0, "", False, placement)
        quiet.append(q)
        progress(f"storm: {rate:g}/s {mix}{' at another port' if away else ''}")
        r = run_once(messages, size, rate, mix, away, placement)
        r["quiet_msgs_per_s"] = q["msgs_per_s"]
        r["share_of_quiet"] = round(r["msgs_per_s"] / q["msgs_per_s"], 3)
        r["cpu_share_of_quiet"] = round(q["rx_cpu_us_per_msg"] / r["rx_cpu_us_per_msg"], 3)
        runs.append(r)
    quiet_rate = sum(q["msgs_per_s"] for q in quiet) / len(quiet)
    return {"workload": "storm", "messages": messages, "size": size, "placement": placement,
            "quiet": {"msgs_per_s": round(quiet_rate), "runs": quiet,
                      "exact": all(q["exact"] for q in quiet)},
            "runs": runs, "exact": all(q["exact"] for q in quiet) and all(
                r["exact"] for r in runs),
            "elapsed_s": round(time.perf_counter() - t0, 1), "machine": machine(),
            "sources": SOURCES}
