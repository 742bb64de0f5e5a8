"""What a node holds in memory per peer, per link and per queued message (issue 14, item 5).

Sans-I/O, on the simulated network (virtual time, so idle timers expire at once): a hub node
and ``--peers`` peer nodes, secure by default. The hub's state is sized by walking the object
graph of its Exon protocol and node core (``sys.getsizeof`` over every object reachable from
them, classes, modules and functions left out), at each stage::

    .venv/bin/python bench/memory.py --peers 200 --queued 20000

Stages: a hub with a PULL and no peer; every peer associated and linked with a PUSH (links
established, idle); ``--queued`` messages of ``--size`` bytes waiting in the hub's queue; the
queue read; every peer closed its socket and went quiet past ``idle_release_s`` and
``session_idle_s`` (what stays is the peers' keys and addresses the hub learnt, as expected
of trust on first use). Prints one JSON object.
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import types
from random import Random
from typing import Any

from a3m.exon import ExonConfig
from a3m.testing.sim import LinkModel, Network
from a3m.testing.sim_node import NodeHost

_SKIP = (type, types.ModuleType, types.FunctionType, types.BuiltinFunctionType,
         types.MethodType, types.CodeType, types.FrameType)


def deep_size(*roots: Any) -> int:
    """Bytes of every object reachable from ``roots`` (each counted once)."""
    seen: set[int] = set()
    stack = list(roots)
    total = 0
    while stack:
        obj = stack.pop()
        if id(obj) in seen or isinstance(obj, _SKIP):
            continue
        seen.add(id(obj))
        total += sys.getsizeof(obj)
        stack.extend(gc.get_referents(obj))
    return total


def hub_size(hub: NodeHost) -> int:
    app, hub.app = hub.app, None  # the test's own callback is not the node's state
    try:
        return deep_size(hub.proto, hub.core, hub.bridge)
    finally:
        hub.app = app


def measure(peers: int, queued: int, size: int, secure: bool = True) -> dict[str, Any]:
    cfg = ExonConfig(secure=secure)
    net = Network(seed=1, default=LinkModel(delay_s=0.0005, jitter_s=0.0))
    rng = Random(1)
    hub = NodeHost("hub", rng, cfg)
    net.add("hub", hub)
    pull = hub.core.create("PULL", "sink", capacity=max(256, queued // peers + 1),
                           capacity_max=0)
    net.run_for(0.1)
    out: dict[str, Any] = {"peers": peers, "queued": queued, "size": size, "secure": secure}
    base = hub_size(hub)
    out["hub_bytes_alone"] = base

    hosts = []
    for i in range(peers):
        name = f"p{i}"
        h = NodeHost(name, rng, cfg)
        net.add(name, h)
        h.proto.associate("hub", net.address["hub"])
        push = h.core.create("PUSH", "src")
        push.link(("hub", "sink"), net.now)
        net.flush(name)
        hosts.append((h, push))
    net.run_until(lambda: len(pull.established_links()) == peers, max_time=120)
    net.run_for(2.0)  # settle: every ACK in, every send record idle
    linked = hub_size(hub)
    out["per_peer_linked_bytes"] = round((linked - base) / peers)
    link = pull.established_links()[0]
    out["per_link_core_bytes"] = round(deep_size(pull.links) / peers)
    out["one_link_bytes"] = deep_size(link)

    per_peer = queued // peers
    payload = b"q" * size
    for h, push in hosts:
        for _ in range(per_peer):
            assert push.try_send(payload)
        net.flush(h.name)
    total = per_peer * peers
    net.run_until(lambda: sum(len(lk.inq) for lk in pull.links.values()) == total,
                  max_time=120)
    with_queue = hub_size(hub)
    out["queued_total"] = total
    out["per_queued_message_bytes"] = round((with_queue - linked) / total, 1)
    while pull.try_recv() is not None:
        pass
    net.flush("hub")
    net.run_for(2.0)
    out["after_read_bytes"] = hub_size(hub)

    net.flush("hub")  # the credits the reads gave back
    for h, push in hosts:
        push.close(net.now)
        net.flush(h.name)
    net.run_for(cfg.session_idle_s + cfg.idle_release_s + cfg.probe_interval_max_s + 10)
    gone = hub_size(hub)
    out["after_idle_bytes"] = gone
    out["after_idle_per_peer_bytes"] = round((gone - base) / peers)
    out["links_left"] = len(pull.links)
    out["records_left"] = hub.proto.record_counts()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--peers", type=int, default=200)
    ap.add_argument("--queued", type=int, default=20000)
    ap.add_argument("--size", type=int, default=64)
    ap.add_argument("--insecure", action="store_true", help="secure=False (the opt-out)")
    args = ap.parse_args()
    print(json.dumps(measure(args.peers, args.queued, args.size, not args.insecure), indent=1))


if __name__ == "__main__":
    main()
