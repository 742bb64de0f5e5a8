"""Baselines measured beside A3M in the same run: raw UDP, pyzmq and pynng PUSH/PULL.

Throughput is counted the same way for every system: messages received divided by the time
from the first to the last one received, at the receiver.
"""

from __future__ import annotations

import socket
import time
from typing import Any


def udp_receiver(ready: Any, results: Any, messages: int, size: int, **_: Any) -> None:
    """Raw UDP, blocking socket, one datagram per message; stops at N or after 0.5 s quiet."""
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
    s.bind(("127.0.0.1", 0))
    ready.put(s.getsockname())
    buf = bytearray(65536)
    s.settimeout(10.0)
    got = 0
    first = last = 0.0
    try:
        s.recv_into(buf)
        first = last = time.perf_counter()
        got = 1
        s.settimeout(0.5)
        while got < messages:
            s.recv_into(buf)
            got += 1
        last = time.perf_counter()
    except TimeoutError:
        pass
    finally:
        if got > 1 and last == first:
            last = time.perf_counter() - 0.5
        s.close()
    rate = (got - 1) / (last - first) if got > 1 and last > first else 0.0
    results.put({"side": "receiver", "received": got, "lost": messages - got,
                 "msgs_per_s": rate})


def udp_sender(address: Any, results: Any, messages: int, size: int, **_: Any) -> None:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 8 << 20)
    payload = b"u" * size
    addr = tuple(address)
    t0 = time.perf_counter()
    for _ in range(messages):
        s.sendto(payload, addr)
    el = time.perf_counter() - t0
    s.close()
    results.put({"side": "sender", "sent": messages, "send_s": el})


def zmq_receiver(ready: Any, results: Any, messages: int, size: int, **_: Any) -> None:
    import zmq

    ctx = zmq.Context()
    s = ctx.socket(zmq.PULL)
    port = s.bind_to_random_port("tcp://127.0.0.1")
    ready.put(("127.0.0.1", port))
    s.recv()
    first = time.perf_counter()
    for _ in range(messages - 1):
        s.recv()
    last = time.perf_counter()
    s.close(linger=0)
    ctx.term()
    results.put({"side": "receiver", "received": messages,
                 "msgs_per_s": (messages - 1) / (last - first)})


def zmq_sender(address: Any, results: Any, messages: int, size: int, **_: Any) -> None:
    import zmq

    ctx = zmq.Context()
    s = ctx.socket(zmq.PUSH)
    s.connect(f"tcp://{address[0]}:{address[1]}")
    payload = b"z" * size
    for _ in range(messages):
        s.send(payload)
    s.close(linger=30_000)
    ctx.term()
    results.put({"side": "sender", "sent": messages})


def nng_receiver(ready: Any, results: Any, messages: int, size: int, **_: Any) -> None:
    import pynng

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    s = pynng.Pull0(listen=f"tcp://127.0.0.1:{port}")
    ready.put(("127.0.0.1", port))
    s.recv()
    first = time.perf_counter()
    for _ in range(messages - 1):
        s.recv()
    last = time.perf_counter()
    s.close()
    results.put({"side": "receiver", "received": messages,
                 "msgs_per_s": (messages - 1) / (last - first)})


def nng_sender(address: Any, results: Any, messages: int, size: int, **_: Any) -> None:
    import pynng

    s = pynng.Push0(dial=f"tcp://{address[0]}:{address[1]}")
    payload = b"n" * size
    for _ in range(messages):
        s.send(payload)
    time.sleep(0.5)  # NNG has no linger: give the queue time to drain before closing
    s.close()
    results.put({"side": "sender", "sent": messages})


def installed(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None
