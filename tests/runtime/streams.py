"""A PUSH linked to a PULL on two real nodes, for the runtime's stream tests."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import a3m


@contextmanager
def push_pull(name: str, capacity: int = 256, **options: Any
              ) -> Iterator[tuple[a3m.Node, a3m.Node, a3m.Socket, a3m.Socket]]:
    """Nodes ``<name>-a`` (with ``options``: the PUSH's) and ``<name>-b`` (the PULL's, with
    ``capacity`` credits per link and no growth), linked; both closed on the way out."""
    a, b = a3m.Node(f"{name}-a", **options), a3m.Node(f"{name}-b")
    try:
        a.associate(b.id, b.address)
        pull = b.socket(a3m.PULL, "in", capacity=capacity, capacity_max=0)
        push = a.socket(a3m.PUSH, "out")
        push.link((b.id, "in"))
        assert push.wait_linked(timeout=5)
        yield a, b, push, pull
    finally:
        a.close(5)
        b.close(5)
