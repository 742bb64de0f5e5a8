"""Join NodeCores in a test: a lossless pipe that may reorder (Exon is exactly-once but
unordered), with a fake clock and hooks to hold back or inspect messages."""

from __future__ import annotations

from collections.abc import Callable
from random import Random

from a3m.core import message as m
from a3m.core.node_core import NodeCore
from a3m.patterns import register_builtin

Hold = Callable[[str, str, m.Message], bool]  # (src node, dst node, msg) -> hold back?


class Pipe:
    def __init__(self, *ids: str, seed: int = 0, reorder: bool = False) -> None:
        self.rng = Random(seed)
        self.reorder = reorder
        self.now = 0.0
        self.nodes: dict[str, NodeCore] = {}
        for i in ids:
            self.nodes[i] = register_builtin(NodeCore(i, Random(self.rng.random())))
        self.held: list[tuple[str, str, bytes]] = []
        self.hold: Hold | None = None
        self.log: list[tuple[str, str, m.Message]] = []

    def step(self) -> int:
        batch: list[tuple[str, str, bytes]] = []
        for src, core in self.nodes.items():
            batch.extend((src, dst, data) for dst, data in core.take_output())
        if self.reorder:
            self.rng.shuffle(batch)
        moved = 0
        for src, dst, data in batch:
            msg = m.decode(data)
            self.log.append((src, dst, msg))
            if self.hold is not None and self.hold(src, dst, msg):
                self.held.append((src, dst, data))
                continue
            if dst in self.nodes:
                self.nodes[dst].receive(src, data, self.now)
                moved += 1
        return moved

    def run(self, rounds: int = 1000) -> None:
        for _ in range(rounds):
            if not self.step() and not any(c.has_output() for c in self.nodes.values()):
                break

    def release(self, reverse: bool = False) -> None:
        held, self.held = self.held, []
        for src, dst, data in (reversed(held) if reverse else held):
            self.nodes[dst].receive(src, data, self.now)
        self.run()

    def advance(self, dt: float) -> None:
        self.now += dt
        for core in self.nodes.values():
            core.handle_timer(self.now)
        self.run()

    def types(self, src: str) -> list[str]:
        return [m.TYPE_NAMES.get(x.type, hex(x.type)) for s, _, x in self.log if s == src]
