"""Bytes per outstanding cookie (issue 26, item 5), on both ends of a link.

Sans-I/O, on the simulated network: node ``a`` sends ``--messages`` 64-byte messages to a PULL
on node ``b`` (capacity large enough that none waits for credits) that does not read them, once
without cookies and once with a cookie on each (a small int: the application's own object is
its own cost). Each node's state is sized as ``bench/memory.py`` sizes it (every object
reachable from its Exon protocol and node core); the difference per message is what a cookie
costs while its outcome is awaited: the sender's record of it, and the receiver's note of a
flagged message not yet taken. Then ``b`` reads everything and the outcomes are read: what
remains per message is shown too (0 expected)::

    .venv/bin/python bench/cookie_memory.py --messages 20000

Prints one JSON object.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
from random import Random
from typing import Any

sys.path.insert(0, os.path.dirname(__file__))
from memory import deep_size  # noqa: E402

from a3m.exon import ExonConfig  # noqa: E402
from a3m.testing.sim import LinkModel, Network  # noqa: E402
from a3m.testing.sim_node import NodeHost  # noqa: E402


def run(messages: int, cookies: bool) -> dict[str, int]:
    net = Network(1, LinkModel())
    cfg = ExonConfig()
    a, b = NodeHost("a", Random(1), cfg), NodeHost("b", Random(2), cfg)
    net.add("a", a)
    net.add("b", b)
    a.proto.associate("b", net.address["b"])
    b.proto.associate("a", net.address["a"])
    pull = b.core.create("PULL", "sink", capacity=messages + 10, capacity_max=0)
    push = a.core.create("PUSH", "src")
    push.link(("b", "sink"), 0.0)
    net.flush("a")
    net.run_until(lambda: push.is_linked(), max_time=60, what="link")
    sent = [0]

    def app(host: NodeHost, now: float) -> None:
        while sent[0] < messages and push.try_send(b"m" * 64, sent[0] if cookies else None):
            sent[0] += 1

    a.app = app
    net.flush("a")
    net.run_until(lambda: sent[0] >= messages and pull.links[("a", "src")].recv.received
                  >= messages and not a.proto.in_flight(), max_time=600, what="all arrived")
    net.run_for(1.0)
    gc.collect()
    held = {"sender": deep_size(a.proto, a.core), "receiver": deep_size(b.proto, b.core)}
    a.app = None
    while pull.try_recv() is not None:
        pass
    net.flush("b")
    got: list[Any] = []

    def all_known() -> bool:
        got.extend(push.take_cookies(messages))
        return not cookies or len(got) >= messages

    net.run_until(all_known, max_time=600, what="outcomes")
    net.run_for(1.0)
    gc.collect()
    held.update(sender_after=deep_size(a.proto, a.core), receiver_after=deep_size(b.proto,
                                                                                 b.core))
    return held


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=20000)
    args = ap.parse_args()
    plain = run(args.messages, cookies=False)
    marked = run(args.messages, cookies=True)
    n = args.messages
    print(json.dumps({
        "messages": n,
        "sender_bytes_per_cookie": round((marked["sender"] - plain["sender"]) / n, 1),
        "receiver_bytes_per_cookie": round((marked["receiver"] - plain["receiver"]) / n, 1),
        "sender_bytes_left_per_message": round(
            (marked["sender_after"] - plain["sender_after"]) / n, 2),
        "receiver_bytes_left_per_message": round(
            (marked["receiver_after"] - plain["receiver_after"]) / n, 2),
        "plain": plain, "cookies": marked,
    }))


if __name__ == "__main__":
    main()
