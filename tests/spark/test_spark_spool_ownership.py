"""A spool belongs to one query (issue 15, item 0): rows spooled for one checkpoint are never
read by another, and a collector started with other options is never silently reused.

The two runs a new user makes: a source with ``node``, ``bind`` and ``socket`` but no ``spool``,
run twice with a fresh checkpoint and a new port each time (before: the second query read the
rows the first left uncommitted, or attached to the first query's collector, whose address
the producers were not told). These drive the reader as Spark does (initialOffset,
latestOffset, partitions, read), with real collectors and producer nodes, and no session.
"""

from __future__ import annotations

import socket
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

import a3m
from a3m.spark import collector
from a3m.spark.source import A3MStreamReader


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def produce(node_id: str, port: int, payloads: list[bytes]) -> None:
    with a3m.Node(f"producer-{uuid.uuid4().hex[:6]}") as p:
        p.associate(node_id, ("127.0.0.1", port))
        push = p.socket(a3m.PUSH, "out")
        push.link((node_id, "events"))
        assert push.wait_linked(timeout=30), "the producer never linked to the source's node"
        for m in payloads:
            push.send(m, timeout=30)
        assert p.flush(timeout=30)


def rows_until(reader: A3MStreamReader, start: dict[str, int], n: int) -> list[Any]:
    """Wait until ``n`` rows are past ``start``; read them as Spark would."""
    deadline = time.monotonic() + 30
    while True:
        end = reader.latestOffset(start)
        if end["0"] - start["0"] >= n or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    # read() yields Arrow record batches (columns in the schema's order): rows as tuples here
    return [row for part in reader.partitions(start, end) for batch in reader.read(part)
            for row in zip(*(col.to_pylist() for col in batch.columns), strict=True)]


@pytest.fixture
def node_id() -> Any:
    nid = f"collector-{uuid.uuid4().hex[:8]}"
    readers: list[A3MStreamReader] = []
    yield nid, readers
    for r in readers:
        collector.stop(r.spool_dir, timeout=15)


def test_a_new_query_never_reads_what_another_left(node_id: Any) -> None:
    nid, readers = node_id
    p1, p2 = free_port(), free_port()
    first = A3MStreamReader({"node": nid, "bind": f"127.0.0.1:{p1}", "socket": "events"})
    readers.append(first)
    start = first.initialOffset()
    produce(nid, p1, [b"old-%d" % i for i in range(300)])
    assert len(rows_until(first, start, 300)) == 300  # read, never committed

    # A second query: fresh checkpoint, another port (the first one's collector still runs).
    second = A3MStreamReader({"node": nid, "bind": f"127.0.0.1:{p2}", "socket": "events"})
    readers.append(second)
    start2 = second.initialOffset()
    produce(nid, p2, [b"new-%d" % i for i in range(500)])
    rows = rows_until(second, start2, 500)
    assert sorted(r[2] for r in rows) == sorted(b"new-%d" % i for i in range(500))

    # A third query with the first one's options exactly: same spool and collector, but it
    # starts after what the first query left there.
    third = A3MStreamReader({"node": nid, "bind": f"127.0.0.1:{p1}", "socket": "events"})
    assert third.spool_dir == first.spool_dir
    start3 = third.initialOffset()
    produce(nid, p1, [b"third-%d" % i for i in range(200)])
    rows = rows_until(third, start3, 200)
    assert sorted(r[2] for r in rows) == sorted(b"third-%d" % i for i in range(200))


def test_a_collector_with_other_options_is_an_error_not_reused(node_id: Any,
                                                               tmp_path: Path) -> None:
    nid, readers = node_id
    spool = str(tmp_path / "shared-spool")
    a = A3MStreamReader({"node": nid, "bind": f"127.0.0.1:{free_port()}", "socket": "events",
                         "spool": spool})
    readers.append(a)
    a.initialOffset()
    b = A3MStreamReader({"node": nid, "bind": f"127.0.0.1:{free_port()}", "socket": "events",
                         "spool": spool})
    with pytest.raises(collector.CollectorMismatch, match="shared-spool"):
        b.initialOffset()
