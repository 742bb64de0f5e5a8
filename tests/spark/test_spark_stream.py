"""The a3m streaming source and sink: exact counts across a query stop and restart, and a
replayed batch never sent twice."""

from __future__ import annotations

import json
import socket
import threading
import time
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyarrow")

import a3m  # noqa: E402
from a3m.spark import collector  # noqa: E402
from a3m.spark.spool import Spool  # noqa: E402

from .peer import draining
from .peer import wait_until as _wait


def _free_udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# ---------------------------------------------------------------------- spool (no Spark)

def _rows(payloads: list[bytes]) -> dict[str, list[Any]]:
    from datetime import UTC, datetime

    now = datetime.now(UTC)
    return {"node": ["p"] * len(payloads), "socket": ["s"] * len(payloads),
            "topic": [None] * len(payloads), "payload": payloads,
            "received_at": [now] * len(payloads)}


def test_spool_appends_reads_ranges_and_commits(tmp_path: Path) -> None:
    sp = Spool(tmp_path)
    assert (sp.start(), sp.durable_end()) == (0, 0)
    assert sp.append(_rows([b"a", b"b", b"c"])) == (0, 3)
    assert sp.append(_rows([b"d", b"e"])) == (3, 5)
    t = sp.read(2, 4)
    assert t.column("payload").to_pylist() == [b"c", b"d"]
    assert t.column("offset").to_pylist() == [2, 3]
    assert sp.commit(3) == 1  # the first segment is wholly below 3
    assert (sp.start(), sp.durable_end(), sp.pending()) == (3, 5, 2)
    assert Spool(tmp_path).durable_end() == 5  # state is on disk only
    with pytest.raises(RuntimeError, match="not all on disk"):
        sp.read(0, 5)
    sp.commit(5)
    assert (Spool(tmp_path).start(), Spool(tmp_path).durable_end()) == (5, 5)
    assert sp.append(_rows([b"f"])) == (5, 6)  # indexes never restart
    assert not list(tmp_path.glob(".*.tmp"))


# ---------------------------------------------------------------------- source

@pytest.mark.spark
def test_source_exact_counts_across_stop_and_restart(tmp_path: Path, spark: Any) -> None:
    port = _free_udp_port()
    spool, out, ck = tmp_path / "spool", tmp_path / "out", tmp_path / "ck"

    def start() -> Any:
        df = (spark.readStream.format("a3m").option("node", "collector-t")
              .option("bind", f"127.0.0.1:{port}").option("socket", "events")
              .option("spool", str(spool)).option("maxRowsPerBatch", "700").load())
        return (df.writeStream.format("parquet").option("path", str(out))
                .option("checkpointLocation", str(ck))
                .trigger(processingTime="200 milliseconds").start())

    def counted(q: Any) -> int:
        return sum(p["numInputRows"] for p in q.recentProgress)

    q = start()
    try:
        with a3m.Node("producer-t") as prod:
            prod.associate("collector-t", ("127.0.0.1", port))
            push = prod.socket(a3m.PUSH, "out")
            push.link("collector-t/events")
            assert push.wait_linked(timeout=30)

            def send(lo: int, hi: int) -> None:
                for i in range(lo, hi):
                    push.send(b"%d" % i, timeout=60)

            send(0, 2000)
            _wait(lambda: counted(q) >= 1000, 120, "the first run to take rows")
            q.stop()  # mid-way: part of the 2000 is spooled and not yet read
            sender = threading.Thread(target=send, args=(2000, 4000))
            sender.start()  # the producer keeps going while no query runs
            time.sleep(1.0)
            q = start()
            sender.join(60)
            assert prod.flush(timeout=30)

            def all_rows() -> int:
                try:
                    return int(spark.read.parquet(str(out)).count())
                except Exception:
                    return 0

            _wait(lambda: all_rows() >= 4000, 120, "4000 rows in the output")
            time.sleep(1.0)  # a duplicate would land now
        q.processAllAvailable()
        rows = spark.read.parquet(str(out))
        payloads = [r["payload"] for r in rows.select("payload").collect()]
        assert len(payloads) == 4000
        assert sorted(int(p) for p in payloads) == list(range(4000))
        assert {r["node"] for r in rows.select("node").distinct().collect()} == {"producer-t"}
        offsets = [r["offset"] for r in rows.select("offset").collect()]
        assert sorted(offsets) == list(range(4000))
    finally:
        q.stop()
        assert collector.stop(spool)
    assert collector.running(spool) is None


# ---------------------------------------------------------------------- sink

@pytest.mark.spark
def test_sink_delivers_each_row_once_and_skips_a_replayed_batch(tmp_path: Path,
                                                                spark: Any) -> None:
    src, ck, ledger = tmp_path / "in", tmp_path / "ck", tmp_path / "ledger"
    src.mkdir()
    with a3m.Node("sink-peer") as peer:
        pull = peer.socket(a3m.PULL, "rows")
        with draining(pull) as got:
            host, port = peer.address

            def start() -> Any:
                df = spark.readStream.schema("payload string").json(str(src))
                return (df.writeStream.format("a3m").option("peers", "sink-peer/rows")
                        .option("addresses", f"sink-peer={host}:{port}")
                        .option("ledger", str(ledger))
                        .option("checkpointLocation", str(ck)).start())

            for k in range(2):
                (src / f"f{k}.json").write_text(
                    "\n".join(json.dumps({"payload": f"r{k}-{i}"}) for i in range(300)))
            q = start()
            q.processAllAvailable()
            q.stop()
            _wait(lambda: len(got) >= 600, 30, "600 rows at the peer")
            # Forget that the last batch committed: the restarted query replays it.
            commits = sorted((ck / "commits").glob("[0-9]*"), key=lambda p: int(p.name))
            last = commits[-1]
            last.unlink()
            (last.parent / f".{last.name}.crc").unlink(missing_ok=True)
            (src / "f2.json").write_text(
                "\n".join(json.dumps({"payload": f"r2-{i}"}) for i in range(100)))
            q = start()
            q.processAllAvailable()
            q.stop()
            _wait(lambda: len(got) >= 700, 30, "700 rows at the peer")
            time.sleep(1.0)
    assert len(got) == 700
    assert sorted(got) == sorted(
        f"r{k}-{i}".encode() for k, n in ((0, 300), (1, 300), (2, 100)) for i in range(n))
