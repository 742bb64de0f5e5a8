"""The Exon transport workload: ``a3m.exon.Endpoint`` sender and receiver processes."""

from __future__ import annotations

import struct
import time
from typing import Any

SEQ = struct.Struct(">Q")


def exon_receiver(ready: Any, results: Any, messages: int, size: int,
                  check: bool = False, secure: bool = True, **_: Any) -> None:
    """Receive ``messages``; with ``check``, audit each one's sequence number."""
    from a3m.exon import Endpoint

    try:
        # Through the relay (check=True) the relay stands for a real network: 1400-byte
        # datagrams, not loopback's 64 KiB.
        with Endpoint("bench-rx", **net_options(check, secure)) as ep:
            ready.put(ep.address)
            seen: dict[int, int] = {}
            got = 0
            first = last = 0.0
            deadline = time.monotonic() + 600
            while got < messages and time.monotonic() < deadline:
                batch = ep.recv_many(8192, timeout=600)
                if not first:
                    first = time.perf_counter()
                got += len(batch)
                if check:
                    for _, payload in batch:
                        n = SEQ.unpack_from(payload)[0]
                        seen[n] = seen.get(n, 0) + 1
            last = time.perf_counter()
            # Anything arriving late would be a duplicate: listen a little longer.
            extra = 0
            if check:
                end = time.monotonic() + 1.0
                while time.monotonic() < end:
                    try:
                        for _, payload in ep.recv_many(8192, timeout=0.1):
                            n = SEQ.unpack_from(payload)[0]
                            seen[n] = seen.get(n, 0) + 1
                            extra += 1
                    except Exception:
                        pass
            stats = ep.stats
        report: dict[str, Any] = {
            "side": "receiver", "received": got + extra,
            "msgs_per_s": (got - 1) / (last - first) if got > 1 and last > first else 0.0,
            "elapsed_s": last - first, "stats": stats,
        }
        if check:
            report["distinct"] = len(seen)
            report["duplicates"] = sum(c - 1 for c in seen.values() if c > 1)
            report["phantoms"] = sum(1 for n in seen if not 0 <= n < messages)
            report["lost"] = sum(1 for n in range(messages) if n not in seen)
        results.put(report)
    except Exception as exc:  # report, never hang the parent
        results.put({"side": "receiver", "error": repr(exc)})


def net_options(check: bool, secure: bool = True, busy_poll_s: float | None = None
                ) -> dict[str, Any]:
    """Node options: through the relay (``check``) 1400-byte datagrams; ``secure=False``: the
    opt-out, measured beside the secure default in the same run; ``busy_poll_s`` (None: the
    node's default)."""
    opts: dict[str, Any] = {"loopback_datagram_size": 0} if check else {}
    opts["secure"] = secure
    if busy_poll_s is not None:
        opts["busy_poll_s"] = busy_poll_s
    return opts


def exon_sender(address: Any, results: Any, messages: int, size: int,
                check: bool = False, secure: bool = True, **_: Any) -> None:
    from a3m.exon import Endpoint

    try:
        with Endpoint("bench-tx", **net_options(check, secure)) as ep:
            ep.associate("bench-rx", tuple(address))
            # Numbered payloads only where the receiver audits them (``check``); otherwise
            # one payload, as the baselines send (peers.py): the same work per message.
            pad = b"e" * max(0, size - SEQ.size)
            same = SEQ.pack(0) + pad
            t0 = time.perf_counter()
            if check:
                for i in range(messages):
                    ep.send("bench-rx", SEQ.pack(i) + pad, timeout=120)
            else:
                for _ in range(messages):
                    ep.send("bench-rx", same, timeout=120)
            clean = ep.close(timeout=120)
            el = time.perf_counter() - t0
            stats = ep.stats
        results.put({"side": "sender", "sent": messages, "send_s": el, "closed_clean": clean,
                     "stats": stats})
    except Exception as exc:
        results.put({"side": "sender", "error": repr(exc)})
