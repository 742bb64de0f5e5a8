"""Which I/O loop can keep up with a UDP blast? (the receive side of the Exon runtime)

A sender process blasts N datagrams of SIZE bytes at a receiver process that drains them with
one of: a thread on a blocking socket (recv_into), a thread on a non-blocking socket woken by
select (our driver's loop), the asyncio default loop, uvloop (a DatagramProtocol: one callback
per datagram), and both loops with a reader callback that drains the socket in bursts
(a3m.aio's driver). Prints one JSON line per loop: datagrams received and rate.
Usage: python bench/ioloop.py [N] [SIZE] [KIND,KIND...]
"""

from __future__ import annotations

import asyncio
import json
import multiprocessing as mp
import select
import socket
import sys
import time


def _sock() -> socket.socket:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
    s.bind(("127.0.0.1", 0))
    return s


def blocking(s: socket.socket, n: int) -> tuple[int, float, float]:
    buf = bytearray(65536)
    s.settimeout(5)
    s.recv_into(buf)
    t0 = time.perf_counter()
    got, last = 1, t0
    s.settimeout(0.5)
    try:
        while got < n:
            s.recv_into(buf)
            got += 1
            last = time.perf_counter()
    except TimeoutError:
        pass
    return got, t0, last


def select_nonblocking(s: socket.socket, n: int) -> tuple[int, float, float]:
    buf = bytearray(65536)
    s.setblocking(False)
    got, t0, last = 0, 0.0, 0.0
    while got < n:
        r, _, _ = select.select([s], [], [], 0.5 if got else 5)
        if not r:
            break
        while True:
            try:
                s.recv_into(buf)
            except BlockingIOError:
                break
            got += 1
        last = time.perf_counter()
        t0 = t0 or last
    return got, t0, last


def with_asyncio(s: socket.socket, n: int, uv: bool) -> tuple[int, float, float]:
    class P(asyncio.DatagramProtocol):
        def __init__(self) -> None:
            self.got, self.t0, self.last = 0, 0.0, 0.0

        def datagram_received(self, data: bytes, addr: object) -> None:
            self.got += 1
            self.last = time.perf_counter()
            self.t0 = self.t0 or self.last

    async def main() -> P:
        loop = asyncio.get_running_loop()
        _, proto = await loop.create_datagram_endpoint(P, sock=s)
        prev = -1
        waited = 0.0
        while proto.got < n and waited < 5:
            await asyncio.sleep(0.1)
            waited = waited + 0.1 if proto.got == prev else 0.0
            prev = proto.got
            if proto.got and waited >= 0.5:
                break
        return proto

    if uv:
        import uvloop

        p = uvloop.run(main())
    else:
        p = asyncio.run(main())
    return p.got, p.t0, p.last


def reader_burst(s: socket.socket, n: int, uv: bool) -> tuple[int, float, float]:
    """a3m.aio's way: the loop's reader callback drains the socket (``recvfrom_into`` until it
    would block) instead of one protocol callback per datagram."""
    buf = bytearray(65536)
    st = {"got": 0, "t0": 0.0, "last": 0.0}

    def readable() -> None:
        recv = s.recvfrom_into
        got = st["got"]
        for _ in range(512):
            try:
                recv(buf)
            except BlockingIOError:
                break
            got += 1
        st["got"] = got
        st["last"] = time.perf_counter()
        st["t0"] = st["t0"] or st["last"]

    async def main() -> None:
        loop = asyncio.get_running_loop()
        s.setblocking(False)
        loop.add_reader(s.fileno(), readable)
        prev = -1
        waited = 0.0
        while st["got"] < n and waited < 5:
            await asyncio.sleep(0.1)
            waited = waited + 0.1 if st["got"] == prev else 0.0
            prev = int(st["got"])
            if st["got"] and waited >= 0.5:
                break
        loop.remove_reader(s.fileno())

    if uv:
        import uvloop

        uvloop.run(main())
    else:
        asyncio.run(main())
    return int(st["got"]), st["t0"], st["last"]


def receiver(kind: str, q: mp.Queue, n: int) -> None:  # type: ignore[type-arg]
    s = _sock()
    q.put(s.getsockname())
    if kind == "thread_blocking":
        res = blocking(s, n)
    elif kind == "thread_select":
        res = select_nonblocking(s, n)
    elif kind.endswith("_reader_burst"):
        res = reader_burst(s, n, uv=kind.startswith("uvloop"))
    else:
        res = with_asyncio(s, n, uv=(kind == "uvloop"))
    q.put(res)


def sender(addr: tuple[str, int], n: int, size: int) -> None:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    payload = b"x" * size
    for _ in range(n):
        s.sendto(payload, addr)


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 300_000
    size = int(sys.argv[2]) if len(sys.argv) > 2 else 64
    ctx = mp.get_context("spawn")
    kinds = ("thread_blocking", "thread_select", "asyncio", "uvloop", "asyncio_reader_burst",
             "uvloop_reader_burst")
    for kind in sys.argv[3].split(",") if len(sys.argv) > 3 else kinds:
        q = ctx.Queue()
        p = ctx.Process(target=receiver, args=(kind, q, n))
        p.start()
        addr = q.get()
        tx = ctx.Process(target=sender, args=(addr, n, size))
        tx.start()
        tx.join()
        got, t0, last = q.get()
        p.join()
        rate = (got - 1) / (last - t0) if last > t0 else 0.0
        print(json.dumps({"loop": kind, "size": size, "sent": n, "received": got,
                          "lost": n - got, "rate_per_s": round(rate)}), flush=True)


if __name__ == "__main__":
    main()
