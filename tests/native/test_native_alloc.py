"""The interpreter's allocation counter (``a3m._native.alloc_counting``, ``allocations``): on,
it counts every new block of the ``mem`` and ``obj`` domains; off, nothing; switched on twice
or under another hook (tracemalloc), each block once."""

from __future__ import annotations

import itertools
import tracemalloc
from collections.abc import Iterator

import pytest

from .twins import native

N = 10_000


@pytest.fixture(autouse=True)
def counting_off() -> Iterator[None]:
    yield
    native.alloc_counting(False)


def objects(n: int) -> list[object]:
    """``n`` new objects (``object()`` has no free list: one allocation each); no int is
    made on the way (``itertools.repeat``)."""
    return [object() for _ in itertools.repeat(None, n)]


def counted(n: int, tries: int = 5) -> int:
    """Blocks counted while ``n`` objects are made: the least of ``tries`` counts, since the
    counter is the process's and another thread (a node that lingers from an earlier test of
    the same worker) may allocate meanwhile; it only ever adds."""
    least = -1
    for _ in range(tries):
        before = native.allocations()
        keep = objects(n)
        after = native.allocations()
        assert len(keep) == n
        if least < 0 or after - before < least:
            least = after - before
    return least


def test_on_it_counts_each_new_object() -> None:
    native.alloc_counting(True)
    assert native.alloc_counting_on()
    got = counted(N)
    # every object, the list's first block; its growth is a realloc (not a new block)
    assert N <= got < N + N // 10, got


def test_off_it_counts_nothing() -> None:
    native.alloc_counting(True)
    native.alloc_counting(False)
    assert not native.alloc_counting_on()
    assert counted(N) == 0


def test_switched_on_twice_each_block_is_counted_once() -> None:
    for _ in range(3):  # on, off, on: the same hook comes back
        native.alloc_counting(True)
        native.alloc_counting(True)
        native.alloc_counting(False)
    native.alloc_counting(True)
    got = counted(N)
    assert N <= got < N + N // 10, got


def test_a_hook_put_over_it_leaves_it_counting_once() -> None:
    """tracemalloc hooks over the counter: switched off, the counter stays in the chain (it
    is not on top) and counts nothing; switched on again it is not hooked a second time."""
    native.alloc_counting(True)
    tracemalloc.start()
    try:
        native.alloc_counting(False)
        assert counted(N) == 0
        native.alloc_counting(True)
        got = counted(N)
        assert N <= got < N + N // 10, got
    finally:
        tracemalloc.stop()
    got = counted(N)
    assert N <= got < N + N // 10, got
