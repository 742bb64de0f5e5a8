"""Clock stores (memory, file, wall clock) and association sources (static map, file)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from a3m.errors import UsageError
from a3m.exon import ExonConfig, ExonProtocol, MemoryClockStore, StaticDiscovery
from a3m.exon.clock import NodeClock
from a3m.runtime.clock_store import FileClockStore, WallClockStore
from a3m.runtime.discovery_file import FileDiscovery

from .pair import Pair


def test_node_clock_reserves_ahead_in_blocks() -> None:
    store = MemoryClockStore(10)
    clock = NodeClock(store, block=100)
    assert clock.value == 10 and store.mark == 110
    for _ in range(100):
        clock.take()
    assert store.writes == 1  # one block covered 100 takes
    clock.take()
    assert store.mark >= clock.value and store.writes == 2
    clock.advance_to(10_000)
    assert store.mark >= 10_000 and clock.value == 10_000


def test_file_clock_store_survives_restart(tmp_path: Path) -> None:
    path = tmp_path / "node.clock"
    store = FileClockStore(path)
    assert store.load() == 0
    store.reserve(12345)
    assert path.read_text().strip() == "12345"
    assert FileClockStore(path).load() == 12345
    assert not list(tmp_path.glob("*.tmp"))


def test_file_clock_store_rejects_corruption(tmp_path: Path) -> None:
    path = tmp_path / "bad.clock"
    path.write_text("garbage")
    with pytest.raises(ValueError, match="corrupt"):
        FileClockStore(path).load()


def test_protocol_restart_from_file_clock_starts_above_all_used(tmp_path: Path) -> None:
    path = tmp_path / "a.clock"
    p = Pair("a", "b")
    p.stores["a"] = FileClockStore(path)  # type: ignore[assignment]
    p.start("a")
    for _ in range(10):
        p.nodes["a"].send("b", b"x", p.now)
    p.transfer()
    used = p.nodes["a"]._sr["b"].req_end
    restarted = ExonProtocol("a", ExonConfig(secure=False), clock_store=FileClockStore(path))
    assert restarted.clock >= used


def test_wall_clock_store_moves_forward() -> None:
    a = WallClockStore().load()
    time.sleep(0.001)
    assert WallClockStore().load() > a


def test_static_and_file_discovery(tmp_path: Path) -> None:
    assert StaticDiscovery({"x": ("127.0.0.1", 5)})("x") == ("127.0.0.1", 5)
    path = tmp_path / "nodes.csv"
    path.write_text("# id,host,port\nalpha,127.0.0.1,7000\n\nbeta, 127.0.0.2 ,7001\n")
    disc = FileDiscovery(path)
    assert disc("alpha") == ("127.0.0.1", 7000)
    assert disc("beta") == ("127.0.0.2", 7001)
    assert disc("gamma") is None
    path.write_text("alpha,127.0.0.3,7002\n")
    os.utime(path, ns=(time.time_ns() + 10**9, time.time_ns() + 10**9))
    assert disc("alpha") == ("127.0.0.3", 7002)
    path.write_text("alpha,127.0.0.3\n")
    os.utime(path, ns=(time.time_ns() + 2 * 10**9, time.time_ns() + 2 * 10**9))
    with pytest.raises(ValueError, match="line 1"):
        disc("alpha")


def test_protocol_asks_the_resolver_on_a_miss() -> None:
    asked: list[str] = []

    def resolver(node: str) -> str | None:
        asked.append(node)
        return "addr-b" if node == "b" else None

    a = ExonProtocol("a", ExonConfig(secure=False), resolver=resolver)
    a.send("b", b"hello", 0.0)
    a.send("c", b"nowhere", 0.0)
    out = a.datagrams_to_send(0.0)
    assert [addr for _, addr in out] == ["addr-b"]
    assert "b" in asked and "c" in asked
    assert a.stats.no_address >= 1  # c's request waits; timers retry


def test_config_from_options() -> None:
    cfg = ExonConfig.from_options({"window_per_peer": 7})
    assert cfg.window_per_peer == 7
    with pytest.raises(UsageError, match="unknown Exon option"):
        ExonConfig.from_options({"windw": 1})
    with pytest.raises(UsageError):
        ExonConfig(secure=False, rto_initial_s=5.0)  # above rto_max_s
