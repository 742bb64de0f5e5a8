"""Shared by the native flood tests: datagrams sent to a running node from a few local
addresses, then a bounded wait until the node has counted them all."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any


@contextmanager
def sources(count: int, first: int) -> Iterator[list[socket.socket]]:
    """``count`` UDP sockets bound to 127.0.0.<first>, <first + 1>, ... (the node's budgets
    count each address as a source)."""
    socks: list[socket.socket] = []
    try:
        for i in range(count):
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            socks.append(s)
            s.bind((f"127.0.0.{first + i}", 0))
        yield socks
    finally:
        for s in socks:
            s.close()


def flood(socks: list[socket.socket], address: Any, datagrams: Iterable[bytes]) -> None:
    """Send ``datagrams`` to ``address`` from ``socks`` in turn, pausing a millisecond every
    200 (the node's socket buffer is not a test subject: what it drops is counted apart)."""
    for k, d in enumerate(datagrams):
        socks[k % len(socks)].sendto(d, address)
        if k % 200 == 199:
            time.sleep(0.001)


def settle(node: Any, counted: Callable[[dict[str, int]], int], n: int
           ) -> tuple[dict[str, int], int]:
    """Wait (60 s at most) until ``counted(exon stats)`` and the kernel's drops reach ``n``,
    then a tenth of a second more (a datagram counted twice would show); returns the exon
    stats and the drops then."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if counted(node.stats["exon"]) + (node.stats["rx_drops"] or 0) >= n:
            break
        time.sleep(0.05)
    time.sleep(0.1)
    return node.stats["exon"], node.stats["rx_drops"] or 0
