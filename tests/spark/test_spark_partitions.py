"""A partitioned source (issue 15, item 1): several receiving nodes, one spool partition each,
producers spread over them, one Spark input partition per spool partition, read by executors
straight from storage through ``pyarrow.fs`` (input partitions carry no rows)."""

from __future__ import annotations

import pickle
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

import a3m
from a3m.spark import collector
from a3m.spark.source import A3MStreamReader, SpoolPartition
from a3m.spark.spool import Spool, SpoolView, read_batches


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def rows(n: int, tag: str = "p") -> dict[str, list[Any]]:
    from datetime import UTC, datetime

    now = datetime.now(UTC)
    return {"node": [tag] * n, "socket": ["s"] * n, "topic": [None] * n,
            "payload": [b"%s-%d" % (tag.encode(), i) for i in range(n)],
            "received_at": [now] * n}


def test_executors_read_a_range_through_pyarrow_fs_uris(tmp_path: Path) -> None:
    sp = Spool(tmp_path / "s")
    sp.append(rows(5, "a"))
    sp.append(rows(5, "b"))
    for where in (str(tmp_path / "s"), (tmp_path / "s").as_uri()):  # a path and file://
        got = [p for b in read_batches(where, 3, 8, ["payload", "offset"])
               for p in b.column("payload").to_pylist()]
        assert got == [b"a-3", b"a-4", b"b-0", b"b-1", b"b-2"]
    view = SpoolView((tmp_path / "s").as_uri())
    assert (view.start(), view.durable_end()) == (0, 10)
    assert view.commit(5) == 1 and view.start() == 5 and Spool(tmp_path / "s").committed() == 5
    with pytest.raises(RuntimeError, match="not all on disk"):
        list(read_batches(str(tmp_path / "s"), 0, 10))


def test_an_input_partition_carries_where_to_read_not_the_rows(tmp_path: Path) -> None:
    """Before, partitions() read the rows on the driver and shipped them as Arrow bytes."""
    reader = A3MStreamReader({"node": "n", "spool": str(tmp_path / "sp"), "partitions": "2",
                              "collectors": "external"})
    for i, loc in enumerate(reader.locations):
        Spool(loc).append(rows(30_000, f"p{i}"))
    parts = reader.partitions({"0": 0, "1": 0}, {"0": 30_000, "1": 20_000})
    assert [(p.part, p.start, p.end) for p in parts] == [(0, 0, 30_000), (1, 0, 20_000)]
    assert all(len(pickle.dumps(p)) < 1000 for p in parts)
    # read() in another process, as on an executor: it opens the segments itself
    blob = pickle.dumps((reader, parts[1]))
    code = ("import pickle,sys; r,p=pickle.loads(sys.stdin.buffer.read()); "
            "print(sum(b.num_rows for b in r.read(p)))")
    out = subprocess.run([sys.executable, "-c", code], input=blob, capture_output=True,
                         timeout=60, check=True)
    assert out.stdout.strip() == b"20000"
    assert isinstance(parts[0], SpoolPartition)


def test_a_batch_is_shared_out_over_partitions_and_legacy_offsets_are_partition_0(
        tmp_path: Path) -> None:
    reader = A3MStreamReader({"node": "n", "spool": str(tmp_path / "sp"), "partitions": "3",
                              "collectors": "external", "maxRowsPerBatch": "100"})
    for loc, n in zip(reader.locations, (10, 200, 200), strict=True):
        Spool(loc).append(rows(n))
    assert reader.latestOffset({"0": 0, "1": 0, "2": 0}) == {"0": 10, "1": 45, "2": 45}
    assert reader.latestOffset({"offset": 10, "1": 0}) == {"0": 10, "1": 50, "2": 50}
    assert reader.node_ids() == ["n-0", "n-1", "n-2"]
    with pytest.raises(ValueError, match="3 partitions and 2 bind"):
        A3MStreamReader({"node": "n", "partitions": "3", "bind": "h:1,h:2"})
    assert A3MStreamReader({"node": "n", "partitions": "3", "bind": "h:7400"}).binds == [
        "h:7400", "h:7401", "h:7402"]


def _produce(targets: list[tuple[str, int]], socket_tag: str, n: int) -> None:
    """One PUSH socket linked to every partition's node: it load-balances over them."""
    with a3m.Node(f"producer-{uuid.uuid4().hex[:6]}") as p:
        push = p.socket(a3m.PUSH, "out")
        for nid, port in targets:
            p.associate(nid, ("127.0.0.1", port))
            push.link((nid, socket_tag))
        for nid, _ in targets:
            assert push.wait_linked((nid, socket_tag), timeout=30)
        for i in range(n):
            push.send(b"%d" % i, timeout=30)
            if i % 200 == 199:
                # Round robin shares out among the links that hold credits: a producer that
                # outruns one partition's grants (the compiled cores send 2000 rows in a few
                # ms) would hand the rest to the other. Flushing every 200 rows lets both
                # catch up, as a producer with a steady rate would.
                assert p.flush(timeout=30)
        assert p.flush(timeout=30)


def test_producers_spread_over_the_partitions_nodes_and_each_row_is_read_once(
        tmp_path: Path) -> None:
    ports = [free_port(), free_port()]
    node = f"col-{uuid.uuid4().hex[:6]}"
    reader = A3MStreamReader({"node": node, "partitions": "2", "spool": str(tmp_path / "sp"),
                              "bind": ",".join(f"127.0.0.1:{p}" for p in ports),
                              "socket": "events"})
    try:
        start = reader.initialOffset()
        assert start == {"0": 0, "1": 0}
        _produce(list(zip(reader.node_ids(), ports, strict=True)), "events", 2000)
        deadline = time.monotonic() + 30
        while True:
            end = reader.latestOffset(start)
            if sum(end.values()) >= 2000 or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert end["0"] > 300 and end["1"] > 300, end  # both nodes took a share
        got = [p for part in reader.partitions(start, end) for b in reader.read(part)
               for p in b.column(2).to_pylist()]
        assert sorted(int(x) for x in got) == list(range(2000))
        reader.commit(end)
        assert [SpoolView(loc).committed() for loc in reader.locations] == [end["0"],
                                                                            end["1"]]
    finally:
        assert collector.stop(reader.spool_dir, timeout=20)
    assert all(collector.running(loc) is None for loc in reader.locations)


def test_a_collect_service_serves_an_external_partition(tmp_path: Path) -> None:
    """``a3m collect`` runs a collector on its own; the source only reads its spool."""
    port = free_port()
    spool = tmp_path / "sp"
    proc = subprocess.Popen(
        [sys.executable, "-m", "a3m", "collect", "--spool", str(spool / "part-0000"),
         "--node", "svc-0", "--bind", f"127.0.0.1:{port}", "--socket", "events",
         "--idle-timeout", "0"], stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stderr.readline() if proc.stderr else ""
        assert "collecting: node svc-0" in line, line
        reader = A3MStreamReader({"node": "svc", "partitions": "1", "collectors": "external",
                                  "spool": str(spool / "part-0000")})
        start = reader.initialOffset()
        _produce([("svc-0", port)], "events", 500)
        deadline = time.monotonic() + 30
        while reader.latestOffset(start)["0"] < 500 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert reader.latestOffset(start) == {"0": 500}
        time.sleep(1.5)  # no heartbeat comes from an external source: it keeps serving
        assert collector.running(spool / "part-0000") is not None
    finally:
        proc.terminate()
        assert proc.wait(timeout=30) == 0
