"""Peer liveness over real UDP: a REP node in another process is killed (SIGKILL: no UNLINK, no
close, nothing ever again) while its REQ waits for the reply. The REQ's keepalive PING finds
nobody; after ``peer_timeout_s`` of silence Exon reports the node unreachable, the REQ's recv
raises LinkError well within its own timeout, and the REQ's node closes promptly."""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import socket
import time
from typing import Any

import pytest

import a3m
from a3m.errors import LinkError
from a3m.exon import Endpoint


def rep_node(ready: Any, got: Any) -> None:
    """Child process: a REP that takes one request, says so, and never answers."""
    node = a3m.Node("liveness-rep", peer_timeout_s=1.0, rto_max_s=0.5)
    rep = node.socket(a3m.REP, "rep")
    ready.put(node.address)
    got.put(rep.recv(timeout=60))
    time.sleep(120)  # killed long before


@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs SIGKILL")
def test_req_gets_a_link_error_when_its_rep_process_is_killed() -> None:
    ctx = mp.get_context("spawn")
    ready: Any = ctx.Queue()
    got: Any = ctx.Queue()
    child = ctx.Process(target=rep_node, args=(ready, got), daemon=True)
    child.start()
    # close_revoke_timeout_s: a close that waited on the dead peer would take 300 s, so the
    # bound on the close below (30 s, where well under a second is needed) tells them apart
    node = a3m.Node("liveness-req", peer_timeout_s=1.0, rto_max_s=0.5,
                    close_revoke_timeout_s=300.0)
    try:
        node.associate("liveness-rep", tuple(ready.get(timeout=60)))
        req = node.socket(a3m.REQ, "req", keepalive_s=0.5)
        req.link("liveness-rep/rep")
        assert req.wait_linked(timeout=30)
        req.send(b"are you there?")
        assert got.get(timeout=30) == b"are you there?"
        time.sleep(0.2)  # its ACK is in: the REQ's link is quiet from now on
        os.kill(child.pid, signal.SIGKILL)
        # LinkError, not Timeout: liveness ended the wait (keepalive_s, a PING after 0.5-0.75 s
        # of quiet, + peer_timeout_s, 1 s), not the recv's own generous bound
        with pytest.raises(LinkError, match="went away"):
            req.recv(timeout=60)
        stats = node.stats
        assert stats["peers_unreachable"] >= 1 and stats["exon"]["peers_abandoned"] >= 1
        told = [e for e in node.events(timeout=0) if e.kind != "linked"]
        assert told[0].kind == "unlinked" and told[0].reason == "peer unreachable"
        assert any(e.kind == "peer_unreachable" and e.peer.node == "liveness-rep"
                   and e.reason.startswith("silent for") for e in told), told
        assert node.unreachable_peers() == ["liveness-rep"]
        t0 = time.monotonic()
        assert node.close(timeout=60) is False  # prompt, and says it gave a peer up
        assert time.monotonic() - t0 < 30.0  # generous: see close_revoke_timeout_s above
    finally:
        node.close(timeout=5)
        child.join(timeout=10)
        if child.is_alive():
            child.kill()


def test_endpoint_lists_an_unreachable_peer_and_abandons_it_on_request() -> None:
    """The bare transport reports and lists a silent peer but gives nothing up by itself;
    ``abandon`` reports what it held (here a message that never got a slot: NotDelivered,
    so a receipt for it says False) and the close is then clean and prompt."""
    hole = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    hole.bind(("127.0.0.1", 0))  # an address where nobody answers (datagrams just queue)
    # close_revoke_timeout_s as above: a close that waited on the ghost would take 300 s
    with Endpoint("liveness-ep", peer_timeout_s=1.0, rto_max_s=0.5,
                  close_revoke_timeout_s=300.0) as ep:
        ep.associate("ghost", hole.getsockname())
        rid = ep.send("ghost", b"anyone?", receipt=True)
        assert rid is not None
        deadline = time.monotonic() + 60  # generous: it takes peer_timeout_s (1 s)
        while not ep.unreachable_peers() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert ep.unreachable_peers() == ["ghost"]
        assert ep.stats["peers_unreachable"] == 1 and ep.in_flight() == 1  # kept, not dropped
        assert ep.abandon("ghost") == 1
        assert ep.not_delivered() == [("ghost", b"anyone?", rid)]
        assert ep.outcome_unknown() == [] and ep.wait_receipt(rid, timeout=1) is False
        assert ep.in_flight() == 0 and ep.abandon("ghost") == 0
        t0 = time.monotonic()
        assert ep.close(timeout=60) is True
        assert time.monotonic() - t0 < 30.0  # generous: nothing left to wait for
    hole.close()
