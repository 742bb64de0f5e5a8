"""Cookies under simulated faults: every message sent with a cookie gets exactly one outcome,
DELIVERED exactly for those the peer application took, NOT_DELIVERED never for one it took,
through loss, duplication, reordering, partitions, receiver sockets closing with messages
unread, and receiver nodes crashing and restarting under the same id.

Over many seeds (``A3M_SIM_SEED=<n>`` replays one: the failure names it).
"""

from __future__ import annotations

from collections import Counter
from random import Random

import pytest

from a3m.core.cookies import DELIVERED, NOT_DELIVERED, UNKNOWN, Cookie
from a3m.core.socket_core import SocketCore
from a3m.exon import ExonConfig
from a3m.testing.sim import LinkModel, Network, seed_from_env
from a3m.testing.sim_node import NodeHost

from .conftest import SIMULATED

CFG = ExonConfig(idle_release_s=0.5, probe_interval_s=1.0, probe_interval_max_s=4.0,
                 peer_timeout_s=8.0)
MODELS = [LinkModel(loss=0.2, dup=0.1, reorder=0.3), LinkModel(loss=0.05, dup=0.3, reorder=0.8,
                                                               jitter_s=0.004),
          LinkModel(loss=0.35, reorder=0.5)]


class Receiver:
    """The receiving node ``b``: a PULL whose application takes messages at a random pace,
    which may close its socket (and open a new one) or crash and restart."""

    def __init__(self, net: Network, rng: Random, ahead: bool = False) -> None:
        self.net = net
        self.rng = rng
        #: Read ahead as a3m.Socket's inbox does: runs taken ahead, the flagged ones in
        #: them reported (taken_ahead) only once the application took them from the inbox.
        self.ahead = ahead
        self.inbox: list[bytes] = []
        self.flags: list[tuple[int, object, int]] = []
        self.taken: list[int] = []
        self.incarnations = 0
        self.start(None)

    def start(self, clock: object) -> None:
        self.incarnations += 1
        self.flags, self.inbox = [], []
        host = NodeHost("b", Random(self.rng.random()), CFG,
                        clock_store=clock)  # type: ignore[arg-type]
        host.proto.associate("a", self.net.address.get("a", "a@0"))
        self.host = host
        self.pull = host.core.create("PULL", "sink", capacity=16)
        self.closing: SocketCore | None = None
        host.app = self.app
        if "b" in self.net.hosts or self.incarnations > 1:
            self.net.replace_host("b", host)
        else:
            self.net.add("b", host)

    def app(self, host: NodeHost, now: float) -> None:
        if self.closing is not None and self.closing.is_drained:
            host.core.remove("sink")  # as the runtime frees the tag once closed
            self.closing = None
            self.pull = host.core.create("PULL", "sink", capacity=16)
        if self.closing is None:
            for _ in range(self.rng.randrange(4)):  # a random pace: unread ones pile up
                payload = self._one()
                if payload is None:
                    break
                self.taken.append(int(payload))

    def _one(self) -> bytes | None:
        if not self.ahead:
            got = self.pull.try_recv()
            return None if got is None else got.payload
        if not self.inbox:
            for _, _, payloads in self.pull.try_recv_runs(8, True):
                self.inbox += payloads
            self.flags = list(self.pull.ahead_flags)
            self.pull.ahead_flags.clear()
            self.run_pos = 0
        if not self.inbox:
            return None
        pos, self.run_pos = self.run_pos, self.run_pos + 1
        for _, link, seq in [f for f in self.flags if f[0] == pos]:
            self.pull.taken_ahead(link, seq)  # type: ignore[arg-type]
        return self.inbox.pop(0)

    run_pos = 0

    def close_socket(self) -> None:
        if self.closing is None:
            for _, link, seq in [f for f in self.flags if f[0] >= self.run_pos]:
                self.pull.taken_ahead(link, seq, taken=False)  # type: ignore[arg-type]
            self.flags, self.inbox = [], []
            self.pull.close(self.net.now)
            self.closing = self.pull
            self.net.flush("b")

    def crash_restart(self) -> None:
        self.start(self.host.clock_store)
        self.net.flush("b")


@pytest.mark.parametrize("seed", range(16))
def test_every_cookie_gets_one_true_outcome(seed: int) -> None:
    """Half the seeds read ahead as the runtime's inbox does."""
    seed = seed_from_env(7000 + seed)
    rng = Random(seed)
    net = Network(seed, MODELS[seed % len(MODELS)])
    a = NodeHost("a", Random(rng.random()), CFG)
    net.add("a", a)
    b = Receiver(net, rng, ahead=seed % 2 == 1)
    a.proto.associate("b", net.address["b"])
    push = a.core.create("PUSH", "src", capacity=16, reconnect=True, keepalive_s=1.0,
                         retry_base_s=0.05, retry_max_s=0.5)
    n = 1500
    sent = [0]
    outcomes: dict[int, list[str]] = {}

    def app_a(host: NodeHost, now: float) -> None:
        if not push.links and not push.retry_at:  # refused while the old PULL was closing
            push.link(("b", "sink"), now)
        while sent[0] < n and push.try_send(b"%d" % sent[0], cookie=sent[0]):
            sent[0] += 1
        for c in push.take_cookies(1000):
            assert c.peer == ("b", "sink")
            outcomes.setdefault(int(c.value), []).append(c.outcome)  # type: ignore[call-overload]

    a.app = app_a
    push.link(("b", "sink"), 0.0)
    net.flush("a")
    # Faults while the stream runs: a socket close, a crash, a partition, in a random order.
    faults = [b.close_socket, b.crash_restart, lambda: net.partition(
        {"a"}, net.now, net.now + rng.uniform(0.5, 3.0))]
    rng.shuffle(faults)
    for i, fault in enumerate(faults):
        net.at(1.0 + 4.0 * i + rng.uniform(0, 2.0), fault)
    net.run_until(lambda: sent[0] >= n and len(outcomes) >= n, max_time=900,
                  what="every outcome")
    net.run_for(5.0)  # nothing more may come
    taken = Counter(b.taken)
    assert all(c == 1 for c in taken.values()), "a message taken twice"
    assert sorted(outcomes) == list(range(n))
    for i, got in outcomes.items():
        assert len(got) == 1, f"message {i}: outcomes {got}"
        if got[0] == DELIVERED:
            assert i in taken, f"message {i}: DELIVERED but never taken"
        elif got[0] == NOT_DELIVERED:
            assert i not in taken, f"message {i}: NOT_DELIVERED but taken"
        else:
            assert got[0] == UNKNOWN
    kinds = Counter(o[0] for o in outcomes.values())
    # Most messages went through a live socket: those are known exactly.
    assert kinds[DELIVERED] >= n // 3, kinds
    SIMULATED["messages"] += n
    SIMULATED["runs"] += 1


def test_cookies_cost_nothing_when_unused_and_fan_out_gives_one_per_member() -> None:
    """PUB to three SUBs with a cookie: three outcomes, each DELIVERED once its SUB took it;
    a SUB that unsubscribed before taking its copy makes it NOT_DELIVERED."""
    net = Network(seed_from_env(11), LinkModel(loss=0.1, reorder=0.3))
    rng = Random(net.seed)
    hosts = {n: NodeHost(n, Random(rng.random()), CFG) for n in ("p", "s1", "s2", "s3")}
    for name, h in hosts.items():
        net.add(name, h)
    for x in hosts:
        for y in hosts:
            if x != y:
                hosts[x].proto.associate(y, net.address[y])
    pub = hosts["p"].core.create("PUB", "pub")
    subs = {n: hosts[n].core.create("SUB", "sub") for n in ("s1", "s2", "s3")}
    for sub in subs.values():
        sub.subscribe(b"")
        sub.link(("p", "pub"), 0.0)
    for n in subs:
        net.flush(n)
    net.run_until(lambda: len(pub.established_links()) == 3 and all(
        s.is_linked() for s in subs.values()), max_time=60, what="links")
    assert pub.try_send(b"plain", topic=b"t")  # no cookie: no outcome
    assert pub.try_send(b"hello", cookie="c1", topic=b"t")
    net.flush("p")
    got: dict[str, bytes] = {}

    def take(name: str) -> None:
        while (r := subs[name].try_recv()) is not None:
            if r.payload == b"hello":
                got[name] = r.payload

    for name in ("s1", "s2"):
        hosts[name].app = lambda host, now, name=name: take(name)
    # s3 unsubscribes with its copy unread, then looks: the copy is skipped, not taken.
    net.run_until(lambda: len(got) == 2 and subs["s3"].readable, max_time=60, what="arrivals")
    subs["s3"].unsubscribe(b"")
    assert subs["s3"].try_recv() is None
    net.flush("s3")
    outcomes: list[Cookie] = []
    hosts["p"].app = lambda host, now: outcomes.extend(pub.take_cookies(10))
    net.run_until(lambda: len(outcomes) >= 3, max_time=120, what="outcomes")
    assert sorted((c.peer.node, c.outcome) for c in outcomes) == [
        ("s1", DELIVERED), ("s2", DELIVERED), ("s3", NOT_DELIVERED)]
    assert {c.value for c in outcomes} == {"c1"}


def test_a_restarted_peer_ends_the_links_at_its_first_handshake() -> None:
    """No keepalive: the receiver takes nothing, crashes and comes back under the same id;
    its first handshake names a new incarnation (Exon's PeerRestarted), so the sender ends
    its link at once and every cookie of it is UNKNOWN, long before any PING could tell."""
    net = Network(seed_from_env(31), LinkModel(loss=0.1, reorder=0.2))
    rng = Random(net.seed)
    a = NodeHost("a", Random(rng.random()), CFG)
    net.add("a", a)
    b = Receiver(net, rng)
    b.host.app = None  # it takes nothing
    a.proto.associate("b", net.address["b"])
    a.core.create("PULL", "hello")
    push = a.core.create("PUSH", "src", capacity=16, keepalive_s=0.0)
    push.link(("b", "sink"), 0.0)
    net.flush("a")
    net.run_until(lambda: push.is_linked(), max_time=60, what="link")
    for i in range(10):
        assert push.try_send(b"%d" % i, cookie=i)
    net.flush("a")
    net.run_until(lambda: not a.proto.in_flight(), max_time=60, what="acknowledged")
    net.run_for(2.0)
    b.crash_restart()
    b.host.app = None
    hello = b.host.core.create("PUSH", "out")
    hello.link(("a", "hello"), net.now)  # the new incarnation's first words to a
    net.flush("b")
    restarted_at = net.now
    got: list[Cookie] = []

    def known() -> bool:
        got.extend(push.take_cookies(100))
        return len(got) == 10

    net.run_until(known, max_time=restarted_at + 30, what="outcomes after the restart")
    assert a.bridge.peers_restarted == 1
    assert {c.outcome for c in got} == {UNKNOWN}
