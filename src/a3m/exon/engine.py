"""Which Exon engine a node runs, and the verbs every engine answers (:class:`Transport`).

:class:`~a3m.exon.protocol.ExonProtocol` is the specification. ``a3m._native.ExonCore`` is its
twin in Rust (``native/src/exon/``): the same datagrams and events from the same inputs, over
the same secure layer (``a3m.exon.secure``, Python in both: it opens what the engine reads and
seals what it sends). :func:`new_protocol` makes the one that runs: the native engine where
``a3m.NATIVE`` and ``A3M_ENGINE`` is not ``python``; ``A3M_ENGINE=python`` (or no native module)
keeps the Python one. ``docs/design.md``, "The native data plane".
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Callable, Hashable
from random import Random
from typing import Any, Protocol

from a3m._dataplane import native
from a3m.exon import wire
from a3m.exon.clock import ClockStore, MemoryClockStore
from a3m.exon.config import ExonConfig
from a3m.exon.discovery import Resolver
from a3m.exon.events import Event
from a3m.exon.pacer import FirstProbePacer
from a3m.exon.protocol import ExonProtocol
from a3m.exon.secure import NodeKey, SecureLayer, TrustStore
from a3m.exon.state import PEER_CHANCES, ExonStats

Address = Hashable
#: ``python`` keeps the Python engine even where the native one is built; ``native`` (the
#: default where a3m.NATIVE) runs the Rust twin.
ENGINE_ENV = "A3M_ENGINE"


class Transport(Protocol):
    """The verbs of an Exon engine that the layers above use (``docs/design.md``, section 1)."""

    id: str

    @property
    def stats(self) -> ExonStats: ...

    @property
    def closing(self) -> bool: ...

    def associate(self, node_id: str, addr: Address,
                  public_key: str | bytes | None = None) -> None: ...

    def send(self, dst: str, payload: bytes, now: float, receipt: bool = False) -> int | None: ...

    def send_many(self, dst: str, payloads: list[bytes], now: float) -> int: ...

    def send_room(self, dst: str) -> int: ...

    def can_send(self, dst: str, nbytes: int = 0) -> bool: ...

    def in_flight(self) -> int: ...

    def consumed(self, nbytes: int) -> None: ...

    def receive_datagram(self, data: bytes, addr: Address, now: float) -> None: ...

    def receive_datagrams(self, batch: list[tuple[bytes, Address]], now: float) -> None: ...

    def datagrams_to_send(self, now: float) -> list[tuple[bytes, Address]]: ...

    def has_output(self) -> bool: ...

    def next_timer(self) -> float | None: ...

    def handle_timer(self, now: float) -> None: ...

    def drain_events(self) -> list[Event]: ...

    def next_event(self) -> Event | None: ...

    def close(self, now: float) -> None: ...

    def is_closed(self) -> bool: ...

    def is_finished(self) -> bool: ...

    def abandon(self, peer: str, now: float) -> int: ...

    def unreachable_peers(self) -> list[str]: ...

    def srtt(self, peer: str) -> float | None: ...

    def peer_pto(self, peer: str) -> float: ...

    def max_peer_pto(self) -> float: ...

    def max_unfragmented(self, peer: str) -> int: ...

    def path_stats(self, peer: str) -> dict[str, float] | None: ...

    def record_counts(self) -> tuple[int, int]: ...

    def is_idle(self) -> bool: ...

    def announce(self, now: float) -> None: ...

    def address_of(self, node_id: str) -> Address | None: ...


def default_engine() -> str:
    """``native`` or ``python``: what :func:`new_protocol` makes when not told."""
    want = os.environ.get(ENGINE_ENV, "").strip().lower()
    if want == "python" or native is None:
        return "python"
    return "native"


def new_protocol(node_id: str, config: ExonConfig | None = None, rng: Random | None = None,
                 clock_store: ClockStore | None = None, resolver: Resolver | None = None,
                 path_mtu: Callable[[Address], int] | None = None, key: NodeKey | None = None,
                 entropy: Callable[[int], bytes] | None = None, trust: TrustStore | None = None,
                 engine: str | None = None) -> Any:
    """An Exon engine for ``node_id``, with :class:`ExonProtocol`'s arguments; ``engine``:
    ``native`` or ``python`` (None: :func:`default_engine`)."""
    kind = engine or default_engine()
    if kind == "python" or native is None:
        return ExonProtocol(node_id, config, rng, clock_store, resolver, path_mtu, key, entropy,
                            trust)
    wire.encode_id(node_id)
    cfg = config or ExonConfig()
    events: deque[Event] = deque()
    stats = ExonStats()
    pacer = FirstProbePacer(cfg.first_probe_rate)
    core = native.ExonCore(node_id, cfg, clock_store or MemoryClockStore(), resolver, path_mtu,
                           pacer, events, stats)
    if cfg.secure:
        backoff_cap = (min(cfg.rto_max_s, cfg.peer_timeout_s / PEER_CHANCES)
                       if cfg.peer_timeout_s else cfg.rto_max_s)
        entropy = entropy or os.urandom
        sec = SecureLayer(
            node_id, key or NodeKey.generate(entropy),
            trust or TrustStore(cfg.trust, getattr(resolver, "public_key", None)),
            entropy, stats, events, core._path_proven,
            handshake_rate=cfg.handshake_rate, rekey_after_s=cfg.rekey_after_s,
            idle_s=cfg.session_idle_s, backoff_cap_s=backoff_cap,
            timeout_s=cfg.rto_initial_s, retry_rate=cfg.retry_rate,
            on_session=core._session_ready, pacer=pacer, rtt_of=core.peer_pto)
        core.attach_secure(sec)
    return core
