"""The PUSH/PULL workload: an ``a3m.Node`` with a PUSH socket in one process, a PULL in
another. With ``check``, every message carries its sequence number and the receiver audits
exactly-once and order."""

from __future__ import annotations

import time
from typing import Any

from a3m.benchmarks.transport import SEQ
from a3m.benchmarks.transport import net_options as _net


def pull_receiver(ready: Any, results: Any, messages: int, size: int, check: bool = False,
                  batch: int = 0, secure: bool = True, **_: Any) -> None:
    import a3m

    try:
        with a3m.Node("bench-rx", **_net(check, secure)) as node:
            # capacity: credits per link (ZeroMQ's HWM is 1000); 4096 keeps loopback busy
            pull = node.socket(a3m.PULL, "sink", capacity=4096)
            ready.put(node.address)
            seen: dict[int, int] = {}
            in_order = True
            last = -1
            first_t = 0.0
            got = 0
            while got < messages:
                # with ``batch``, recv_many: up to that many at a time (the batch API)
                payloads = (pull.recv_many(batch, timeout=600) if batch
                            else [pull.recv(timeout=600)])
                if not first_t:
                    first_t = time.perf_counter()
                got += len(payloads)
                if check:
                    for payload in payloads:
                        n = SEQ.unpack_from(payload)[0]
                        seen[n] = seen.get(n, 0) + 1
                        in_order = in_order and n == last + 1
                        last = n
            last_t = time.perf_counter()
            extra = 0
            if check:
                end = time.monotonic() + 1.0
                while time.monotonic() < end:
                    try:
                        n = SEQ.unpack_from(pull.recv(timeout=0.1))[0]
                    except a3m.Timeout:
                        continue
                    seen[n] = seen.get(n, 0) + 1
                    extra += 1
            stats = node.stats
        report: dict[str, Any] = {
            "side": "receiver", "received": got + extra,
            "msgs_per_s": (got - 1) / (last_t - first_t) if got > 1 else 0.0,
            "stats": stats["exon"],
        }
        if check:
            report.update(distinct=len(seen), in_order=in_order,
                          duplicates=sum(c - 1 for c in seen.values() if c > 1),
                          phantoms=sum(1 for n in seen if not 0 <= n < messages),
                          lost=sum(1 for n in range(messages) if n not in seen))
        results.put(report)
    except Exception as exc:
        results.put({"side": "receiver", "error": repr(exc)})


def push_sender(address: Any, results: Any, messages: int, size: int, check: bool = False,
                batch: int = 0, secure: bool = True, cookies: bool = False, **_: Any) -> None:
    """With ``cookies``, every message is sent with one (its number) and the sender reads
    the outcomes as they come, then waits for the last of them before it closes."""
    import a3m

    try:
        with a3m.Node("bench-tx", **_net(check, secure)) as node:
            node.associate("bench-rx", tuple(address))
            push = node.socket(a3m.PUSH, "source")
            push.link("bench-rx/sink")
            if not push.wait_linked(timeout=30):
                raise RuntimeError("could not link to bench-rx/sink")
            # Numbered payloads only where the receiver audits them (``check``); otherwise
            # one payload, as the baselines send (peers.py): the same work per message.
            pad = b"p" * max(0, size - SEQ.size)
            same = SEQ.pack(0) + pad
            t0 = time.perf_counter()
            if batch:  # send_many: ``batch`` messages per call (the batch API)
                for i in range(0, messages, batch):
                    n = min(messages, i + batch) - i
                    chunk = ([SEQ.pack(j) + pad for j in range(i, i + n)] if check
                             else [same] * n)
                    done = 0
                    while done < n:
                        done += push.send_many(chunk[done:], timeout=120)
            elif cookies:
                delivered = 0
                for i in range(messages):
                    push.send(SEQ.pack(i) + pad if check else same, timeout=120, cookie=i)
                    if i & 1023 == 1023:
                        delivered += sum(c.outcome == a3m.DELIVERED for c in push.cookies(4096))
                while delivered < messages:
                    c = push.recv_cookie(timeout=120)
                    if c.outcome != a3m.DELIVERED:
                        raise RuntimeError(f"message {c.value}: {c.outcome}")
                    delivered += 1
            elif check:
                for i in range(messages):
                    push.send(SEQ.pack(i) + pad, timeout=120)
            else:
                for _ in range(messages):
                    push.send(same, timeout=120)
            clean = push.close(timeout=120)
            el = time.perf_counter() - t0
            stats = node.stats
        results.put({"side": "sender", "sent": messages, "send_s": el, "closed_clean": clean,
                     "stats": stats["exon"], "cookies": cookies})
    except Exception as exc:
        results.put({"side": "sender", "error": repr(exc)})
