"""Delivery journals without Spark: rows round-trip, back-pressure instead of drops, errors surface."""

from __future__ import annotations

import shutil
import threading
from pathlib import Path

import pytest

pytest.importorskip("pyarrow")

from a3m.journal import (  # noqa: E402
    JournalError,
    JournalWriter,
    message_id,
    partition_dir,
    read_journal,
)


def test_rows_round_trip_partitioned_by_node(tmp_path: Path) -> None:
    with JournalWriter(tmp_path, "alpha") as a, JournalWriter(tmp_path, "beta") as b:
        a.record_sent("src", ("beta", "sink"), message_id("alpha", "src", 7), 64, 1000.25)
        b.record_delivered("sink", "alpha/src", message_id("alpha", "src", 7), 64, 1000.25,
                           1000.2515)
    rows = sorted(read_journal(tmp_path).to_pylist(), key=lambda r: r["direction"])
    assert [r["node"] for r in rows] == ["beta", "alpha"]
    delivered, sent = rows
    assert sent["direction"] == "sent" and delivered["direction"] == "delivered"
    assert sent["msg_id"] == delivered["msg_id"] == "alpha/src/0:7"
    assert (sent["socket"], sent["peer_node"], sent["peer_socket"]) == ("src", "beta", "sink")
    assert (delivered["peer_node"], delivered["peer_socket"]) == ("alpha", "src")
    assert sent["sent_ts"] is None
    us = delivered["ts"].timestamp() * 1e6 - delivered["sent_ts"].timestamp() * 1e6
    assert round(us) == 1500
    assert (tmp_path / "node=alpha").is_dir() and (tmp_path / "node=beta").is_dir()


def test_full_buffer_blocks_callers_and_drops_nothing(tmp_path: Path) -> None:
    n, threads = 5_000, 4
    j = JournalWriter(tmp_path, "n1", max_buffer_rows=50, batch_rows=20, flush_interval_s=0.05)

    def produce(k: int) -> None:
        for i in range(n):
            j.record_sent(f"s{k}", ("n2", "r"), message_id("n1", f"s{k}", i), 8, 1.0 + i)

    workers = [threading.Thread(target=produce, args=(k,)) for k in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(timeout=60)
    j.close(timeout=30)
    table = read_journal(tmp_path)
    assert table.num_rows == n * threads == j.rows_written
    assert len(set(table.column("msg_id").to_pylist())) == n * threads
    assert j.blocked > 0  # the bound was hit, and callers waited instead of dropping
    assert j.files_written >= n * threads // 50


def test_flush_makes_rows_visible_before_close(tmp_path: Path) -> None:
    j = JournalWriter(tmp_path, "n1", flush_interval_s=60)
    for i in range(3):
        j.record_sent("s", ("n2", "r"), message_id("n1", "s", i), 1, float(i))
    j.flush(timeout=10)
    assert read_journal(tmp_path).num_rows == 3
    j.close()
    with pytest.raises(JournalError):
        j.record_sent("s", ("n2", "r"), "x", 1, 0.0)


def test_a_failed_write_is_raised_not_swallowed(tmp_path: Path) -> None:
    j = JournalWriter(tmp_path, "n1", flush_interval_s=60)
    shutil.rmtree(partition_dir(tmp_path, "n1"))  # the flusher's next write fails
    j.record_sent("s", ("n2", "r"), "n1/s/0", 1, 0.0)
    with pytest.raises(JournalError):
        j.flush(timeout=10)
    with pytest.raises(JournalError):
        j.record_sent("s", ("n2", "r"), "n1/s/1", 1, 0.0)
    with pytest.raises(JournalError):
        j.close(timeout=10)


def test_node_ids_with_path_characters_are_escaped(tmp_path: Path) -> None:
    with JournalWriter(tmp_path, "rack 1/node=a") as j:
        j.record_sent("s", ("b", "r"), "m", 1, 0.0)
    assert [p.name for p in tmp_path.iterdir()] == ["node=rack%201%2Fnode%3Da"]
    assert read_journal(tmp_path).column("node").to_pylist() == ["rack 1/node=a"]


def test_bad_peer_is_refused(tmp_path: Path) -> None:
    with JournalWriter(tmp_path, "n1") as j, pytest.raises(ValueError):
        j.record_sent("s", "no-socket-part", "m", 1, 0.0)
