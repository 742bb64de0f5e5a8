"""Deterministic keys and entropy for simulated nodes (a seed replays handshakes too)."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from random import Random

from a3m.exon.secure import NodeKey


def sim_key(name: str) -> NodeKey:
    """The long-term key of simulated node ``name``: the same across its restarts, as a key
    file keeps it (never use outside the simulator: anyone can compute it)."""
    return NodeKey(hashlib.sha256(b"a3m-sim-node-key/" + name.encode("utf-8")).digest())


def sim_entropy(rng: Random) -> Callable[[int], bytes]:
    """Entropy drawn from a seeded generator (the simulator's only kind of randomness)."""
    return Random(rng.random()).randbytes
