"""PUB -> SUB throughput: A3M (synchronised, nothing dropped), pyzmq and pynng (which drop at
their high-water marks: their loss is reported beside their rate)."""

from __future__ import annotations

import socket
import time
from typing import Any

from a3m.benchmarks.transport import SEQ


def a3m_sub(ready: Any, results: Any, messages: int, size: int, check: bool = False,
            **_: Any) -> None:
    import a3m

    try:
        net = {"loopback_datagram_size": 0} if check else {}
        with a3m.Node("bench-sub", **net) as node:
            sub = node.socket(a3m.SUB, "sub", capacity=4096)
            sub.subscribe(b"")
            ready.put(node.address)
            seen: dict[int, int] = {}
            in_order, last, got, first = True, -1, 0, 0.0
            while got < messages:
                p = sub.recv(timeout=600)
                first = first or time.perf_counter()
                got += 1
                if check:
                    k = SEQ.unpack_from(p)[0]
                    seen[k] = seen.get(k, 0) + 1
                    in_order = in_order and k == last + 1
                    last = k
            end = time.perf_counter()
            extra = 0
            if check:
                try:
                    while True:
                        k = SEQ.unpack_from(sub.recv(timeout=0.5))[0]
                        seen[k] = seen.get(k, 0) + 1
                        extra += 1
                except a3m.Timeout:
                    pass
        rep: dict[str, Any] = {"side": "receiver", "received": got + extra,
                               "msgs_per_s": (got - 1) / (end - first) if got > 1 else 0.0}
        if check:
            rep.update(distinct=len(seen), in_order=in_order,
                       duplicates=sum(c - 1 for c in seen.values() if c > 1),
                       phantoms=sum(1 for k in seen if not 0 <= k < messages),
                       lost=sum(1 for k in range(messages) if k not in seen))
        results.put(rep)
    except Exception as exc:
        results.put({"side": "receiver", "error": repr(exc)})


def a3m_pub(address: Any, results: Any, messages: int, size: int, check: bool = False,
            **_: Any) -> None:
    import a3m

    try:
        net = {"loopback_datagram_size": 0} if check else {}
        with a3m.Node("bench-pub", **net) as node:
            node.associate("bench-sub", tuple(address))
            pub = node.socket(a3m.PUB, "pub")
            pub.link("bench-sub/sub")
            if not pub.wait_linked(timeout=30):
                raise RuntimeError("could not link")
            pad = b"p" * max(0, size - SEQ.size)
            for i in range(messages):
                pub.send(SEQ.pack(i) + pad, topic=b"t", timeout=120)
            pub.close(timeout=120)
        results.put({"side": "sender", "sent": messages})
    except Exception as exc:
        results.put({"side": "sender", "error": repr(exc)})


def _count(recv: Any, messages: int, quiet_s: float) -> tuple[int, float, float]:
    got, first, last = 0, 0.0, 0.0
    while got < messages:
        try:
            recv()
        except Exception:
            break  # quiet for quiet_s: the rest was dropped
        last = time.perf_counter()
        first = first or last
        got += 1
    return got, first, last


def zmq_sub(ready: Any, results: Any, messages: int, size: int, **_: Any) -> None:
    import zmq

    ctx = zmq.Context()
    s = ctx.socket(zmq.SUB)
    s.setsockopt(zmq.SUBSCRIBE, b"")
    s.setsockopt(zmq.RCVTIMEO, 1000)
    port = s.bind_to_random_port("tcp://127.0.0.1")
    ready.put(("127.0.0.1", port))
    got, first, last = _count(s.recv, messages, 1.0)
    s.close(linger=0)
    ctx.term()
    results.put({"side": "receiver", "received": got, "lost": messages - got,
                 "msgs_per_s": (got - 1) / (last - first) if got > 1 and last > first else 0.0})


def zmq_pub(address: Any, results: Any, messages: int, size: int, **_: Any) -> None:
    import zmq

    ctx = zmq.Context()
    s = ctx.socket(zmq.PUB)
    s.connect(f"tcp://{address[0]}:{address[1]}")
    time.sleep(0.5)  # the slow joiner: without this the subscriber misses the start
    payload = b"z" * size
    for _ in range(messages):
        s.send(payload)
    s.close(linger=5000)
    ctx.term()
    results.put({"side": "sender", "sent": messages})


def nng_sub(ready: Any, results: Any, messages: int, size: int, **_: Any) -> None:
    import pynng

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    s = pynng.Sub0(listen=f"tcp://127.0.0.1:{port}", recv_timeout=1000)
    s.subscribe(b"")
    ready.put(("127.0.0.1", port))
    got, first, last = _count(s.recv, messages, 1.0)
    s.close()
    results.put({"side": "receiver", "received": got, "lost": messages - got,
                 "msgs_per_s": (got - 1) / (last - first) if got > 1 and last > first else 0.0})


def nng_pub(address: Any, results: Any, messages: int, size: int, **_: Any) -> None:
    import pynng

    s = pynng.Pub0(dial=f"tcp://{address[0]}:{address[1]}")
    time.sleep(0.5)
    payload = b"n" * size
    for _ in range(messages):
        s.send(payload)
    time.sleep(0.5)
    s.close()
    results.put({"side": "sender", "sent": messages})
