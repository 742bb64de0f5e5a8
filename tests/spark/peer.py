"""Helpers of the sink tests: a receiving socket drained in the background, a bounded wait."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import a3m


@contextmanager
def draining(sock: Any) -> Iterator[list[bytes]]:
    """Collect every payload ``sock`` receives into the yielded list until the block ends."""
    got: list[bytes] = []
    stop = threading.Event()

    def drain() -> None:
        while not stop.is_set():
            try:
                got.extend(sock.recv_many(1024, timeout=0.1))
            except a3m.Timeout:
                pass

    thread = threading.Thread(target=drain, daemon=True)
    thread.start()
    try:
        yield got
    finally:
        stop.set()
        thread.join()


def wait_until(cond: Any, timeout: float, what: str) -> None:
    """Poll ``cond()`` until true; AssertionError after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)
