"""The responder's budgets for handshake datagrams from addresses not yet proven
(:class:`HandshakeMeter`): the node's load, each source's budget under load, the key exchanges
token-less HELLOs may have, and the RETRYs that answer the rest (``docs/exon-wire.md``, "Under
load").

The meter holds only numbers and decides; the responder (``responder.py``) counts and acts on
what it decides. Where ``a3m.NATIVE``, its Rust twin (``a3m._native.HandshakeMeter``) runs
instead, shared by the Python responder and the native loop, which sheds a flood's token-less
HELLOs before any Python runs (``new_meter``).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Hashable
from typing import Any, Final

from a3m._dataplane import native

Address = Hashable

#: Under load, handshake datagrams (HELLO, INITIATE) a second that one source may make this
#: node work on (a RETRY, a token or cookie checked, a key exchange), and the burst allowed;
#: beyond it they are dropped before any cryptography (``unauth_shed``). A source is an IPv4
#: address or an IPv6 /64, whatever the port (WireGuard's rule): the port costs an attacker
#: nothing.
SOURCE_RATE = 100.0
#: The handshake and RETRY budgets hold this many seconds' worth at most (the burst): a
#: flood's first moments cost a tenth of a second of key exchanges, not a whole second.
HANDSHAKE_BURST_S = 0.1
#: Under load, a HELLO answered with a RETRY takes this much of its source's budget (a key
#: exchange or a cookie checked takes 1): a RETRY costs an HMAC and a datagram smaller than
#: the HELLO, and ``retry_rate`` bounds them all, so a fleet behind one address (a NAT, a
#: Kubernetes node) gets SOURCE_RATE / RETRY_COST RETRYs a second, then proves itself: 2000,
#: as many as ``retry_rate``'s default, which binds first (at 0.1, 10 000 peers behind one
#: address took 36 s to link, their shed HELLOs backing off).
RETRY_COST = 0.05
#: Sources whose budget is tracked at once; beyond, those idle for a second (their budget
#: full again) are forgotten, and all of them if that is not enough.
MAX_SOURCES = 4096

#: A token-less HELLO's verdict (:meth:`HandshakeMeter.hello`): dropped unread (counted
#: ``unauth_shed``), answered with a RETRY (the node is busy: prove your address), or given a
#: key exchange.
SHED: Final = 0
RETRY: Final = 1
EXCHANGE: Final = 2

_INF: Final = float("inf")


def source_of(addr: Address) -> Hashable:
    """The source an address counts as for the per-source budgets: an IPv4 address, an
    IPv6 /64 (a host's usual share), whatever the port; any other address as it is."""
    if isinstance(addr, tuple) and addr and isinstance(addr[0], str):
        host: str = addr[0]
        if ":" not in host:
            return host
        try:
            return ipaddress.IPv6Address(host.split("%", 1)[0]).packed[:8]
        except ValueError:
            return host
    return addr


class HandshakeMeter:
    """The budgets of handshake datagrams, as token buckets refilled with the time.

    - *Load*: HELLOs and INITIATEs metered at ``handshake_rate`` a second over a second's
      burst; in debt, the node is under load and each source's budget applies.
    - *Sources*: under load, SOURCE_RATE a second per source (an IPv4 address or an IPv6
      /64, whatever the port), MAX_SOURCES tracked at once.
    - *Key exchanges* for token-less HELLOs: ``handshake_rate`` a second (a 0.1 s burst),
      down to a debt of a second's worth; beyond, the HELLO gets a RETRY, ``retry_rate`` a
      second in all; beyond that, nothing.
    """

    __slots__ = ("_rate", "_load", "_load_at", "_bucket", "_bucket_at", "_retry_rate",
                 "_retries", "_retries_at", "_sources")

    def __init__(self, handshake_rate: float = 1000.0, retry_rate: float = 2000.0) -> None:
        self._rate = handshake_rate
        self._load = handshake_rate
        self._load_at = -_INF
        # HELLOs without a token, metered: each takes one (answered or not), down to a debt
        # of a second's worth; a key exchange only while one is left. A flood past the rate
        # keeps it in debt, so a sustained flood gets no key exchange at all.
        self._bucket = handshake_rate * HANDSHAKE_BURST_S
        self._bucket_at = -_INF
        self._retry_rate = retry_rate
        self._retries = retry_rate * HANDSHAKE_BURST_S  # RETRYs a second, in all
        self._retries_at = -_INF
        self._sources: dict[Hashable, list[float]] = {}  # source -> [budget left, when]

    def source_ok(self, addr: Address, now: float, cost: float = 1.0) -> bool:
        """Under load, take ``cost`` from the budget of the source ``addr`` counts as (False:
        it is spent, the datagram is shed). Under load: more HELLOs and INITIATEs than
        ``handshake_rate`` a second, over about a second (WireGuard limits per source only
        under load too: a hundred nodes behind one address starting at once are not load)."""
        rate = self._rate
        load = min(rate, self._load + (now - self._load_at) * rate)
        self._load_at = now
        self._load = max(-rate, load - 1.0)
        if load >= 1.0:
            return True
        key = source_of(addr)
        sources = self._sources
        b = sources.get(key)
        if b is None:
            if len(sources) >= MAX_SOURCES:
                for k in [k for k, v in sources.items() if now - v[1] >= 1.0]:
                    del sources[k]
                if len(sources) >= MAX_SOURCES:
                    sources.clear()
            sources[key] = [SOURCE_RATE - cost, now]
            return True
        left = min(SOURCE_RATE, b[0] + (now - b[1]) * SOURCE_RATE)
        b[1] = now
        if left < cost:
            b[0] = left
            return False
        b[0] = left - cost
        return True

    def hello(self, addr: Address, now: float) -> int:
        """A token-less HELLO from ``addr``: SHED, RETRY or EXCHANGE. Its source's budget is
        charged first (RETRY_COST when the key exchanges are spent, else 1), then the key
        exchanges' bucket, then, when that is spent, the RETRYs'."""
        rate = self._rate
        left = min(rate * HANDSHAKE_BURST_S, self._bucket + (now - self._bucket_at) * rate)
        if not self.source_ok(addr, now, RETRY_COST if left < 1.0 else 1.0):
            return SHED
        self._bucket_at = now
        self._bucket = max(-rate, left - 1.0)
        if left >= 1.0:
            return EXCHANGE
        # Busy: prove your address first (a RETRY is smaller than the HELLO), as many as
        # the RETRY budget allows; beyond it, nothing at all.
        r = self._retry_rate
        retries = min(r * HANDSHAKE_BURST_S, self._retries + (now - self._retries_at) * r)
        self._retries_at = now
        if retries < 1.0:
            self._retries = retries
            return SHED
        self._retries = retries - 1.0
        return RETRY

    def source_count(self) -> int:
        """Sources whose budget is tracked (bounded by MAX_SOURCES)."""
        return len(self._sources)

    def state(self) -> tuple[float, float, float, float, float, float, int]:
        """The buckets' levels and times, and the sources tracked (differential tests)."""
        return (self._load, self._load_at, self._bucket, self._bucket_at, self._retries,
                self._retries_at, len(self._sources))

    def budget_of(self, addr: Address) -> tuple[float, float] | None:
        """The budget left to the source ``addr`` counts as, and when it was last charged
        (None: not tracked)."""
        b = self._sources.get(source_of(addr))
        return None if b is None else (b[0], b[1])


def new_meter(handshake_rate: float, retry_rate: float) -> Any:
    """The meter that runs: the native twin where ``a3m.NATIVE`` (the native loop sheds
    from it), else :class:`HandshakeMeter`."""
    if native is not None:
        return native.HandshakeMeter(handshake_rate, retry_rate)
    return HandshakeMeter(handshake_rate, retry_rate)
