"""Issue 15, item 2: an idempotent sink. A Python worker SIGKILLed after its rows were
delivered and before its ledger marker makes the query fail; restarted from the checkpoint,
the batch is replayed and the task sends its rows again. Without the envelope the peer gets
them twice (the documented exception); with ``idempotent=true`` the receiver's Deduplicator
drops the repeats and each row counts once. Also: the envelope and Deduplicator themselves,
and the ledger on a ``pyarrow.fs`` URI."""

from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

import a3m
from a3m.spark.idempotent import Deduplicator, unwrap, wrap
from a3m.spark.sink import FsLedger, Ledger

from .peer import draining
from .test_spark_stream import _wait


def test_envelope_and_deduplicator(tmp_path: Path) -> None:
    m = wrap("q/3/1", 7, b"payload")
    assert unwrap(m) == ("q/3/1", 7, b"payload")
    for bad in (b"", b"xx", b"\xa3I\x05ab", b"\xa3I\x01a\x00"):
        with pytest.raises(ValueError):
            unwrap(bad)
    d = Deduplicator(tmp_path / "state.json", max_producers=2)
    assert [d.accept(wrap("p", i, b"%d" % i)) for i in range(3)] == [b"0", b"1", b"2"]
    assert [d.accept(wrap("p", i, b"%d" % i)) for i in range(4)] == [None, None, None, b"3"]
    assert (d.accepted, d.duplicates) == (4, 3)
    d.save()
    again = Deduplicator(tmp_path / "state.json")
    assert again.accept(wrap("p", 3, b"3")) is None and again.accept(wrap("p", 4, b"4")) == b"4"
    d.accept(wrap("a", 0, b""))
    d.accept(wrap("b", 0, b""))
    assert "p" not in d.next  # the least recently seen producer is forgotten past the bound


def test_ledger_on_a_pyarrow_uri(tmp_path: Path) -> None:
    ledger = Ledger(f"file://{tmp_path}/ledger")
    assert isinstance(ledger, FsLedger)
    assert ledger.done(4, 1) is None
    ledger.mark(4, 1, 10, complete=False)
    assert ledger.done(4, 1) == {"sent": 10, "complete": False}
    ledger.mark(4, 1, 12)
    assert ledger.done(4, 1) == {"sent": 12, "complete": True}
    ledger.mark(9, 0, 1)
    ledger.prune(5)
    assert ledger.done(4, 1) is None and ledger.done(9, 0) is not None


def _run(spark: Any, tmp_path: Path, idempotent: bool) -> tuple[list[bytes], int]:
    """600 rows in two files; the first task to deliver is killed before its marker; the
    query is restarted from its checkpoint. Returns what the peer's application got and how
    many raw messages arrived."""
    src, ck = tmp_path / "in", tmp_path / "ck"
    src.mkdir()
    flag = tmp_path / "kill-once"
    flag.write_text("")
    with a3m.Node(f"dedup-peer-{idempotent}") as peer:
        pull = peer.socket(a3m.PULL, "rows")
        with draining(pull) as raw:
            host, port = peer.address

            def start() -> Any:
                df = spark.readStream.schema("payload string").json(str(src))
                return (df.writeStream.format("a3m").option("peers", f"{peer.id}/rows")
                        .option("addresses", f"{peer.id}={host}:{port}")
                        .option("ledger", f"file://{tmp_path}/ledger")
                        .option("idempotent", str(idempotent).lower())
                        .option("failpoint", f"kill-after-send:{flag}")
                        .option("checkpointLocation", str(ck)).start())

            for k in range(2):
                (src / f"f{k}.json").write_text(
                    "\n".join(json.dumps({"payload": f"r{k}-{i}"}) for i in range(300)))
            q = start()
            with pytest.raises(Exception):  # noqa: B017 (Spark wraps the worker's death)
                q.processAllAvailable()
            assert not flag.exists()  # the failpoint fired: a worker died before its marker
            q.stop()
            q = start()
            q.processAllAvailable()
            q.stop()
            _wait(lambda: len(raw) >= 600, 30, "600 rows at the peer")
            time.sleep(1.0)
    if not idempotent:
        return raw, len(raw)
    dedup = Deduplicator()
    got = [p for m in raw if (p := dedup.accept(m)) is not None]
    return got, len(raw)


@pytest.mark.spark
def test_a_killed_worker_duplicates_without_the_envelope(tmp_path: Path, spark: Any) -> None:
    got, raw = _run(spark, tmp_path, idempotent=False)
    counts = Counter(got)
    assert set(counts) == {f"r{k}-{i}".encode() for k in range(2) for i in range(300)}
    assert raw > 600 and max(counts.values()) == 2  # the killed task's rows, twice


@pytest.mark.spark
def test_a_killed_worker_delivers_each_row_once_with_the_envelope(tmp_path: Path,
                                                                  spark: Any) -> None:
    got, raw = _run(spark, tmp_path, idempotent=True)
    assert raw > 600  # the retry did send the killed task's rows again...
    assert sorted(got) == sorted(f"r{k}-{i}".encode() for k in range(2) for i in range(300))


def test_collector_keeper_unwraps_and_drops_repeats_across_a_restart(tmp_path: Path) -> None:
    import pyarrow as pa

    from a3m.spark.collector import _keeper
    from a3m.spark.spool import Spool, read_batches

    def rows(payloads: list[bytes]) -> dict[str, Any]:
        n = len(payloads)
        return {"node": ["sink"] * n, "socket": ["s"] * n, "topic": [None] * n,
                "payload": list(payloads),
                "received_at": pa.array([0] * n, pa.timestamp("us", tz="UTC"))}

    spool = Spool(tmp_path / "spool")
    keep = _keeper(spool, dedup=True)
    keep(spool, rows([wrap("q/0/0", i, b"a%d" % i) for i in range(3)] + [b"plain"]))
    keep(spool, rows([wrap("q/0/0", i, b"a%d" % i) for i in range(5)]))  # a retry: 0-2 again
    keep(spool, rows([wrap("q/0/0", i, b"a%d" % i) for i in range(2)]))  # nothing new at all
    keep = _keeper(spool, dedup=True)  # the collector restarted: the state was saved
    keep(spool, rows([wrap("q/0/0", i, b"a%d" % i) for i in range(6)]))
    got = [p for b in read_batches(str(spool.dir), 0, spool.durable_end())
           for p in b.column("payload").to_pylist()]
    assert got == [b"a0", b"a1", b"a2", b"plain", b"a3", b"a4", b"a5"]


@pytest.mark.spark
def test_sink_to_source_chain_is_exactly_once_through_a_killed_worker(tmp_path: Path,
                                                                       spark: Any) -> None:
    """Query A (files -> idempotent a3m sink) feeds query B (a3m source with dedup ->
    Parquet); a worker of A is killed after delivering, A is restarted and replays: B still
    has each row once."""
    import socket as sk

    from a3m.spark import collector

    with sk.socket(sk.AF_INET, sk.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    src, out = tmp_path / "in", tmp_path / "out"
    src.mkdir()
    flag = tmp_path / "kill-once"
    flag.write_text("")
    b = (spark.readStream.format("a3m").option("node", "chain-collector")
         .option("bind", f"127.0.0.1:{port}").option("socket", "rows").option("dedup", "true")
         .option("spool", str(tmp_path / "spool")).load()
         .select("payload").writeStream.format("parquet").option("path", str(out))
         .option("checkpointLocation", str(tmp_path / "ck-b"))
         .trigger(processingTime="200 milliseconds").start())

    def start_a() -> Any:
        df = spark.readStream.schema("payload string").json(str(src))
        return (df.writeStream.format("a3m").option("peers", "chain-collector/rows")
                .option("addresses", f"chain-collector=127.0.0.1:{port}")
                .option("ledger", str(tmp_path / "ledger")).option("idempotent", "true")
                .option("failpoint", f"kill-after-send:{flag}")
                .option("checkpointLocation", str(tmp_path / "ck-a")).start())

    def counted() -> list[str]:
        if not any(out.glob("*.parquet")):
            return []
        rows = spark.read.schema("payload binary").parquet(str(out)).collect()
        return [bytes(r["payload"]).decode() for r in rows]

    try:
        for k in range(2):
            (src / f"f{k}.json").write_text(
                "\n".join(json.dumps({"payload": f"r{k}-{i}"}) for i in range(300)))
        a = start_a()
        with pytest.raises(Exception):  # noqa: B017 (the worker's death, as Spark reports it)
            a.processAllAvailable()
        assert not flag.exists()
        a.stop()
        a = start_a()
        a.processAllAvailable()
        a.stop()
        _wait(lambda: len(counted()) >= 600, 60, "600 rows through the chain")
        time.sleep(1.5)
        got = counted()
    finally:
        b.stop()
        collector.stop(tmp_path / "spool")
    assert sorted(got) == sorted(f"r{k}-{i}" for k in range(2) for i in range(300))


@pytest.mark.spark
def test_confirm_fails_the_task_when_the_receiver_dies_mid_batch(tmp_path: Path,
                                                                  spark: Any) -> None:
    """``confirm=true``: the peer's application takes 100 of 300 rows and closes its socket;
    the rows it never took come back NOT_DELIVERED, the task fails instead of writing its
    marker; with the socket back and the query restarted, the retry sends what was not
    taken and the receiver's Deduplicator keeps each row once."""
    import threading

    src, ck = tmp_path / "in", tmp_path / "ck"
    src.mkdir()
    (src / "f0.json").write_text(
        "\n".join(json.dumps({"payload": f"r{i}"}) for i in range(300)))
    expected = sorted(f"r{i}".encode() for i in range(300))
    with a3m.Node("confirm-peer") as peer:
        host, port = peer.address
        pull = peer.socket(a3m.PULL, "rows", capacity=32)
        first: list[bytes] = []

        def dies_mid_batch() -> None:
            while len(first) < 100:
                first.append(pull.recv(timeout=120))
            pull.close(timeout=10)

        died = threading.Thread(target=dies_mid_batch)
        died.start()

        def start() -> Any:
            df = spark.readStream.schema("payload string").json(str(src))
            return (df.writeStream.format("a3m").option("peers", "confirm-peer/rows")
                    .option("addresses", f"confirm-peer={host}:{port}")
                    .option("ledger", str(tmp_path / "ledger")).option("confirm", "true")
                    .option("timeout", "60").option("checkpointLocation", str(ck)).start())

        q = start()
        with pytest.raises(Exception, match="not delivered"):
            q.processAllAvailable()
        q.stop()
        died.join(30)
        assert len(first) == 100
        again = peer.socket(a3m.PULL, "rows")
        with draining(again) as second:
            q = start()
            q.processAllAvailable()
            q.stop()
            _wait(lambda: len(set(first) | set(second)) >= 300, 30, "300 rows at the peer")
    dedup = Deduplicator()
    got = [p for m in first + second if (p := dedup.accept(m)) is not None]
    assert sorted(got) == expected
