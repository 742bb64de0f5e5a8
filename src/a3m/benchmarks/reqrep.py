"""Request/reply round trips: A3M REQ/REP, raw UDP ping-pong, pyzmq and pynng REQ/REP, and
the Exon transport alone under the same runtime (``a3m_exon``: ``a3m.exon.Endpoint`` ping-pong,
no sockets, links or patterns), so that every run shows what A3M's node layer adds to a round
trip beside what its transport and driver cost.

The server plays the "receiver" role (it starts first), the client measures each round trip.
"""

from __future__ import annotations

import socket
import struct
import time
from typing import Any

from a3m.benchmarks.transport import net_options
from a3m.benchmarks.work import Work

SEQ = struct.Struct(">Q")
MAX_ROUND_TRIPS = 20_000


def _n(messages: int) -> int:
    return min(messages, MAX_ROUND_TRIPS)


def latency_report(samples: list[float], **extra: Any) -> dict[str, Any]:
    samples = sorted(samples)
    n = len(samples)

    def pct(p: float) -> float:
        return round(samples[min(n - 1, int(p * n))] * 1e6, 1) if n else 0.0

    return {"side": "sender", "round_trips": n, "p50_us": pct(0.5), "p90_us": pct(0.9),
            "p99_us": pct(0.99), "max_us": pct(1.0), **extra}


# ------------------------------------------------------------------ A3M

def a3m_server(ready: Any, results: Any, messages: int, size: int, check: bool = False,
               secure: bool = True, count: bool = False, busy_poll_s: float | None = None,
               **_: Any) -> None:
    import a3m

    try:
        net = net_options(check, secure, busy_poll_s)
        work = Work(count)
        with a3m.Node("bench-rep", **net) as node:
            rep = node.socket(a3m.REP, "rep")
            ready.put(node.address)
            seen: dict[int, int] = {}
            for i in range(_n(messages)):
                q = rep.recv(timeout=600)
                if check:
                    k = SEQ.unpack_from(q)[0]
                    seen[k] = seen.get(k, 0) + 1
                rep.send(q, timeout=60)
                if i == 0:
                    work.start()  # after the first request (the link's set-up)
            done = work.report(_n(messages) - 1)
            extra = 0
            if check:  # a duplicate request would show up now
                try:
                    while True:
                        rep.recv(timeout=0.5)
                        extra += 1
                except a3m.Timeout:
                    pass
            time.sleep(0.2)
        results.put({"side": "receiver", "served": _n(messages) + extra,
                     "duplicates": sum(c - 1 for c in seen.values() if c > 1) + extra,
                     "distinct": len(seen), "work": done})
    except Exception as exc:
        results.put({"side": "receiver", "error": repr(exc)})


def a3m_client(address: Any, results: Any, messages: int, size: int, check: bool = False,
               secure: bool = True, cookies: bool = False, count: bool = False,
               busy_poll_s: float | None = None, **_: Any) -> None:
    """With ``cookies``, each request carries one (its number); the outcomes are read as
    they come, outside the timed round trips, and all must be DELIVERED."""
    import a3m

    try:
        net = net_options(check, secure, busy_poll_s)
        work = Work(count)
        with a3m.Node("bench-req", **net) as node:
            node.associate("bench-rep", tuple(address))
            req = node.socket(a3m.REQ, "req")
            req.link("bench-rep/rep")
            if not req.wait_linked(timeout=30):
                raise RuntimeError("could not link")
            pad = b"q" * max(0, size - SEQ.size)
            samples, wrong, delivered = [], 0, 0
            work.start()
            for i in range(_n(messages)):
                body = SEQ.pack(i) + pad
                t0 = time.perf_counter()
                if cookies:
                    req.send(body, timeout=60, cookie=i)
                else:
                    req.send(body, timeout=60)
                answer = req.recv(timeout=60)
                samples.append(time.perf_counter() - t0)
                wrong += answer != body
                if cookies and i & 63 == 63:
                    delivered += sum(c.outcome == a3m.DELIVERED for c in req.cookies(64))
            done = work.report(_n(messages))
            while cookies and delivered < _n(messages):
                if req.recv_cookie(timeout=60).outcome != a3m.DELIVERED:
                    raise RuntimeError("a request was not delivered")
                delivered += 1
            req.close(timeout=10)
        results.put(latency_report(samples, wrong_answers=wrong, sent=len(samples),
                                   cookies=cookies, work=done))
    except Exception as exc:
        results.put({"side": "sender", "error": repr(exc)})


# ------------------------------------------------------------------ the transport alone

def exon_server(ready: Any, results: Any, messages: int, size: int, secure: bool = True,
                count: bool = False, busy_poll_s: float | None = None, **_: Any) -> None:
    """Echo each payload to the node it came from: an Exon ``Endpoint`` on the runtime's
    driver, as a node's, without the node's sockets above it."""
    from a3m.exon import Endpoint

    try:
        work = Work(count)
        with Endpoint("bench-exon-rep", **net_options(False, secure, busy_poll_s)) as ep:
            ready.put(ep.address)
            for i in range(_n(messages)):
                src, payload = ep.recv(timeout=600)
                ep.send(src, payload, timeout=60)
                if i == 0:
                    work.start()
            done = work.report(_n(messages) - 1)
            time.sleep(0.2)  # the last reply's ACK
        results.put({"side": "receiver", "served": _n(messages), "work": done})
    except Exception as exc:
        results.put({"side": "receiver", "error": repr(exc)})


def exon_client(address: Any, results: Any, messages: int, size: int, secure: bool = True,
                count: bool = False, busy_poll_s: float | None = None, **_: Any) -> None:
    from a3m.exon import Endpoint

    try:
        work = Work(count)
        with Endpoint("bench-exon-req", **net_options(False, secure, busy_poll_s)) as ep:
            ep.associate("bench-exon-rep", tuple(address))
            ep.send("bench-exon-rep", b"hello", timeout=30)  # the session's set-up, untimed
            ep.recv(timeout=30)
            payload = b"e" * size
            samples = []
            work.start()
            for _ in range(_n(messages) - 1):
                t0 = time.perf_counter()
                ep.send("bench-exon-rep", payload, timeout=60)
                answer = ep.recv(timeout=60)[1]
                samples.append(time.perf_counter() - t0)
                if answer != payload:  # (a baseline keeps its p50 only: a wrong echo fails it)
                    raise RuntimeError("a wrong echo")
            done = work.report(_n(messages) - 1)
        results.put(latency_report(samples, work=done))
    except Exception as exc:
        results.put({"side": "sender", "error": repr(exc)})


# ------------------------------------------------------------------ raw UDP

def udp_server(ready: Any, results: Any, messages: int, size: int, count: bool = False,
               **_: Any) -> None:
    work = Work(count)
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("127.0.0.1", 0))
    ready.put(s.getsockname())
    s.settimeout(10)
    served = 0
    try:
        for _ in range(_n(messages)):
            data, addr = s.recvfrom(65536)
            s.sendto(data, addr)
            served += 1
            if served == 1:
                work.start()
    except TimeoutError:
        pass
    done = work.report(served - 1)
    s.close()
    results.put({"side": "receiver", "served": served, "work": done})


def udp_client(address: Any, results: Any, messages: int, size: int, count: bool = False,
               **_: Any) -> None:
    work = Work(count)
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(1.0)
    addr = tuple(address)
    payload = b"u" * size
    samples = []
    work.start()
    for _ in range(_n(messages)):
        t0 = time.perf_counter()
        s.sendto(payload, addr)
        try:
            s.recv(65536)
        except TimeoutError:
            continue  # a lost datagram: raw UDP has no recovery
        samples.append(time.perf_counter() - t0)
    done = work.report(_n(messages))
    s.close()
    results.put(latency_report(samples, work=done))


# ------------------------------------------------------------------ pyzmq, pynng

def zmq_server(ready: Any, results: Any, messages: int, size: int, count: bool = False,
               **_: Any) -> None:
    work = Work(count)
    import zmq

    ctx = zmq.Context()
    s = ctx.socket(zmq.REP)
    port = s.bind_to_random_port("tcp://127.0.0.1")
    ready.put(("127.0.0.1", port))
    s.send(s.recv())
    work.start()
    for _ in range(_n(messages) - 1):
        s.send(s.recv())
    done = work.report(_n(messages) - 1)
    time.sleep(0.2)
    s.close(linger=1000)
    ctx.term()
    results.put({"side": "receiver", "served": _n(messages), "work": done})


def zmq_client(address: Any, results: Any, messages: int, size: int, count: bool = False,
               **_: Any) -> None:
    work = Work(count)
    import zmq

    ctx = zmq.Context()
    s = ctx.socket(zmq.REQ)
    s.connect(f"tcp://{address[0]}:{address[1]}")
    payload = b"z" * size
    samples = []
    work.start()
    for _ in range(_n(messages)):
        t0 = time.perf_counter()
        s.send(payload)
        s.recv()
        samples.append(time.perf_counter() - t0)
    done = work.report(_n(messages))
    s.close(linger=0)
    ctx.term()
    results.put(latency_report(samples, work=done))


def nng_server(ready: Any, results: Any, messages: int, size: int, count: bool = False,
               **_: Any) -> None:
    work = Work(count)
    import pynng

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    s = pynng.Rep0(listen=f"tcp://127.0.0.1:{port}")
    ready.put(("127.0.0.1", port))
    s.send(s.recv())
    work.start()
    for _ in range(_n(messages) - 1):
        s.send(s.recv())
    done = work.report(_n(messages) - 1)
    time.sleep(0.2)
    s.close()
    results.put({"side": "receiver", "served": _n(messages), "work": done})


def nng_client(address: Any, results: Any, messages: int, size: int, count: bool = False,
               **_: Any) -> None:
    work = Work(count)
    import pynng

    s = pynng.Req0(dial=f"tcp://{address[0]}:{address[1]}")
    payload = b"n" * size
    samples = []
    work.start()
    for _ in range(_n(messages)):
        t0 = time.perf_counter()
        s.send(payload)
        s.recv()
        samples.append(time.perf_counter() - t0)
    done = work.report(_n(messages))
    s.close()
    results.put(latency_report(samples, work=done))
