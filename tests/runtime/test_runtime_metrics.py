"""``a3m.metrics.Collector`` (SPEC 7): a node's stats as Prometheus metrics, read back
through prometheus_client's own text parser; and the collector process serving them over
HTTP (``a3m collect --metrics-port``)."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

import a3m
import a3m.aio

prometheus_client = pytest.importorskip("prometheus_client")
from prometheus_client import CollectorRegistry, generate_latest  # noqa: E402
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

from a3m.metrics import Collector, exon_metric_name  # noqa: E402


def scrape(text: str) -> dict[str, Any]:
    """Families by name, as the parser reads them."""
    return {f.name: f for f in text_string_to_metric_families(text)}


def value(fams: dict[str, Any], family: str, sample: str, **labels: str) -> float:
    for s in fams[family].samples:
        if s.name == sample and all(s.labels.get(k) == v for k, v in labels.items()):
            return float(s.value)
    raise KeyError(f"{sample} {labels}")


def test_a_nodes_stats_read_back_through_the_prometheus_parser() -> None:
    with a3m.Node("mx-a") as a, a3m.Node("mx-b") as b:
        a.associate("mx-b", b.address)
        pull = b.socket(a3m.PULL, "in")
        push = a.socket(a3m.PUSH, "out")
        push.link("mx-b/in")
        assert push.wait_linked(timeout=30)
        for i in range(50):
            push.send(b"%d" % i, timeout=30)
        for _ in range(50):
            pull.recv(timeout=30)
        assert a.flush(timeout=30)
        registry = CollectorRegistry()
        Collector(a, registry)
        Collector(b, registry)  # two nodes, one registry: the node label tells them apart
        before = a.stats
        fams = scrape(generate_latest(registry).decode())
        after = a.stats
        # Counters: typed counter, named after the conventions (unit last, _total).
        fam = fams[exon_metric_name("bytes_out")]
        assert fam.name == "a3m_exon_out_bytes" and fam.type == "counter"
        got = value(fams, "a3m_exon_out_bytes", "a3m_exon_out_bytes_total", node="mx-a")
        assert before["exon"]["bytes_out"] <= got <= after["exon"]["bytes_out"]
        delivered = value(fams, "a3m_exon_delivered", "a3m_exon_delivered_total", node="mx-b")
        assert delivered >= 1  # (BATCHes: fewer Exon messages than the 50 sent)
        for field in before["exon"]:
            assert fams[exon_metric_name(field)].type == "counter"
        assert value(fams, "a3m_node_events", "a3m_node_events_total", node="mx-a",
                     kind="linked") == 1
        assert value(fams, "a3m_node_lost_messages", "a3m_node_lost_messages_total",
                     node="mx-b") == 0
        # Gauges: the node's tables.
        assert fams["a3m_node_links"].type == "gauge"
        assert value(fams, "a3m_node_links", "a3m_node_links", node="mx-a") == 1
        assert value(fams, "a3m_node_sockets", "a3m_node_sockets", node="mx-b") == 2
        assert value(fams, "a3m_secure_sessions", "a3m_secure_sessions", node="mx-a") == 1
        # Nothing is kept twice: a second scrape reads the stats again.
        for i in range(5):
            push.send(b"more%d" % i, timeout=30)
        for _ in range(5):
            pull.recv(timeout=30)
        assert a.flush(timeout=30)
        again = scrape(generate_latest(registry).decode())
        assert value(again, "a3m_exon_out_bytes", "a3m_exon_out_bytes_total",
                     node="mx-a") > got
    # A closed node's collector says nothing, and a scrape does not fail.
    assert "mx-a" not in generate_latest(registry).decode()


def test_an_asyncio_node_has_the_same_metrics() -> None:
    async def main() -> str:
        async with a3m.aio.Node("mx-aio") as n:
            registry = CollectorRegistry()
            Collector(n, registry)
            return generate_latest(registry).decode()

    fams = scrape(asyncio.run(main()))
    assert value(fams, "a3m_node_sockets", "a3m_node_sockets", node="mx-aio") >= 1


def test_the_collector_process_serves_its_metrics(tmp_path: Path) -> None:
    """``python -m a3m.spark.collector --metrics-port`` (what ``a3m collect`` runs)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    spool = tmp_path / "spool"
    spool.mkdir()
    proc = subprocess.Popen(
        [sys.executable, "-m", "a3m.cli.main", "collect", "--spool", str(spool),
         "--node", "mx-collector", "--metrics-port", str(port), "--idle-timeout", "0"],
        stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stderr is not None
        lines = [proc.stderr.readline(), proc.stderr.readline()]
        assert f"metrics: http://127.0.0.1:{port}/metrics" in "".join(lines), lines
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30).read()
        fams = scrape(text.decode())
        assert value(fams, "a3m_node_sockets", "a3m_node_sockets", node="mx-collector") >= 1
        info = json.loads((spool / "collector.json").read_text())
        assert info["node"] == "mx-collector"
    finally:
        (spool / "stop").touch()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
    assert proc.returncode == 0
    time.sleep(0)  # (the port is free again once the process ended)
