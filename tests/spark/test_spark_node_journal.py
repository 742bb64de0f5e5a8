"""Real nodes write delivery journals; the audit finds every message exactly once in them."""

from __future__ import annotations

import pytest

pytest.importorskip("pyarrow")

import a3m  # noqa: E402
from a3m.journal import read_journal  # noqa: E402


def _traffic(root, n: int) -> None:
    with a3m.Node("alpha", journal=root) as alpha, a3m.Node("beta", journal=root) as beta, \
            a3m.Node("gamma", journal=root) as gamma:
        for src in (alpha,):
            src.associate("beta", beta.address)
            src.associate("gamma", gamma.address)
        push = alpha.socket(a3m.PUSH, "out")
        pulls = [beta.socket(a3m.PULL, "in"), gamma.socket(a3m.PULL, "in")]
        push.link(("beta", "in"))
        push.link(("gamma", "in"))
        assert push.wait_linked(("beta", "in"), timeout=30)
        assert push.wait_linked(("gamma", "in"), timeout=30)
        for i in range(n):
            push.send(b"m%d" % i, timeout=30)
        got = 0
        while got < n:
            for p in pulls:
                try:
                    p.recv(timeout=0.01)
                    got += 1
                except a3m.Timeout:
                    pass


def test_node_journal_rows_join(tmp_path) -> None:
    _traffic(tmp_path, 300)
    t = read_journal(tmp_path).to_pylist()
    sent = {r["msg_id"]: r for r in t if r["direction"] == "sent"}
    delivered = [r for r in t if r["direction"] == "delivered"]
    assert len(sent) == 300 and len(delivered) == 300
    assert {r["msg_id"] for r in delivered} == set(sent)
    for r in delivered:
        s = sent[r["msg_id"]]
        assert (s["node"], s["socket"]) == (r["peer_node"], r["peer_socket"])
        assert (r["node"], r["socket"]) == (s["peer_node"], s["peer_socket"])
        assert r["size"] == s["size"] and r["ts"] >= s["ts"]
    assert {r["node"] for r in delivered} == {"beta", "gamma"}  # round robin over both


@pytest.mark.spark
def test_audit_of_real_journals_is_clean(tmp_path, spark) -> None:
    from a3m.spark.audit import audit

    _traffic(tmp_path, 500)
    summary = audit(spark, str(tmp_path))
    assert summary["sent"] == 500 and summary["delivered"] == 500
    assert summary["lost"] == summary["duplicated"] == summary["phantoms"] == 0
    assert summary["exactly_once"]
    assert {(lk["src"], lk["dst"]) for lk in summary["links"]} == {
        ("alpha/out", "beta/in"), ("alpha/out", "gamma/in")}
    assert summary["latency_us"]["p50"] is not None and summary["latency_us"]["p50"] >= 0
