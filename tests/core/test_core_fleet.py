"""A socket with thousands of links (a collector's PULL): what one peer's message or one
deadline costs must not grow with the idle links (issue 32). Sans-I/O, on the pipe's clock;
the tests count what is touched (queues looked at, heap entries, PINGs), never time."""

from __future__ import annotations

from collections import deque

from a3m.core import message as m
from a3m.core.socket_core import SocketCore

from .pipe import Pipe

PEERS = 1000
SINK = ("c", "sink")


class CountingDeque(deque[bytes]):
    """A link's queue that counts how often a receive looked at it."""

    looks = 0

    def __len__(self) -> int:
        CountingDeque.looks += 1
        return super().__len__()


def fleet(n: int = PEERS, stagger: float = 0.0, **pull_options: float
          ) -> tuple[Pipe, SocketCore, list[SocketCore]]:
    """``n`` producer nodes, a PUSH each, linked to one PULL on node c (``stagger``: the
    links come up that far apart on the pipe's clock)."""
    ids = [f"p{i}" for i in range(n)]
    p = Pipe("c", *ids)
    pull = p.nodes["c"].create("PULL", "sink", **pull_options)
    pushes = []
    for i in ids:
        push = p.nodes[i].create("PUSH", "src", keepalive_s=0.0)
        push.link(SINK, p.now)
        pushes.append(push)
        if stagger:
            p.run()
            p.now += stagger
            p.nodes["c"].handle_timer(p.now)  # (the collector's timers keep time)
    p.run()
    assert len(pull.links) == n and all(push.is_linked(SINK) for push in pushes)
    return p, pull, pushes


def test_one_peer_speaking_costs_no_look_at_the_idle_links() -> None:
    p, pull, pushes = fleet()
    speaker = ("p7", "src")
    for link in pull.links.values():
        link.inq = CountingDeque()
    for i in range(3):
        assert pushes[7].try_send(b"m%d" % i)
    p.run()
    CountingDeque.looks = 0
    assert pull.readable
    assert pull.try_recv() is not None
    assert pull.try_recv_many(10) == [b"m1", b"m2"]
    assert pull.try_recv() is None and not pull.readable
    # Only the speaker's queue was looked at, a few times: none of the 999 idle ones.
    assert CountingDeque.looks <= 12, CountingDeque.looks
    assert pull.links[speaker].recv.delivered == 3


def test_receives_stay_fair_over_the_links_that_have_messages() -> None:
    p, pull, pushes = fleet(50)
    for k in (3, 11, 40):
        for i in range(4):
            assert pushes[k].try_send(b"%d-%d" % (k, i))
    p.run()
    got = [pull.try_recv() for _ in range(12)]
    order = [r.source[0] for r in got if r is not None]
    assert order[:3] == ["p3", "p11", "p40"] and order[3:6] == ["p3", "p11", "p40"]
    assert pull.try_recv() is None
    for k in (3, 11, 40):  # runs: each link in turn gives what it has
        assert pushes[k].try_send(b"x")
    p.run()
    runs = pull.try_recv_runs(2)
    assert [r[0][0] for r in runs] == ["p3", "p11"] and pull.try_recv_many(10) == [b"x"]


def test_a_deadline_touches_only_the_links_whose_deadline_came() -> None:
    """Links came up 10 ms apart over 10 s; every 50 ms turn of the quiet links' keepalive
    looks at the ~5 links due then, not at the 1000 (an idle probe of 5 s here: the
    default's 300 s would not come due within the test)."""
    p, pull, _ = fleet(stagger=0.01, keepalive_s=5.0, idle_probe_s=5.0)
    core = p.nodes["c"]
    looks = []
    t_end = p.now + 12.0
    while p.now < t_end:
        before = pull.timer_looks
        p.now += 0.05
        core.handle_timer(p.now)
        p.run()
        looks.append(pull.timer_looks - before)
    assert max(looks) <= 25, max(looks)
    assert sum(looks) >= PEERS  # each quiet link came due (and was pinged) at least once
    pings = sum(1 for src, _, msg in p.log if src == "c" and msg.type == m.PING)
    assert pings >= PEERS
    t = pull.next_timer()
    assert t is not None and t > p.now  # the earliest link's deadline, not a periodic look


def test_busy_links_send_no_keepalive_and_cost_one_look_a_period() -> None:
    p, pull, pushes = fleet(300, keepalive_s=5.0, idle_probe_s=5.0)
    quiet = set(range(290, 300))
    before = pull.timer_looks
    for _ in range(24):  # 12 s: the busy ones send every half second
        for i, push in enumerate(pushes):
            if i not in quiet:
                assert push.try_send(b"x")
        p.advance(0.5)
        pull.try_recv_many(1000)
    pinged = {dst for src, dst, msg in p.log if src == "c" and msg.type == m.PING}
    assert pinged == {f"p{i}" for i in quiet}
    # A busy link's deadline came about once a period (2 in 12 s) and was put back.
    assert pull.timer_looks - before <= 300 * 4, pull.timer_looks - before


def test_a_lost_node_ends_its_links_only() -> None:
    p, pull, pushes = fleet(300)
    p.nodes["c"].peer_lost("p5", p.now)
    assert ("p5", "src") not in pull.links and len(pull.links) == 299
    p.run()
    assert pushes[6].is_linked(SINK)


def test_quiet_links_waiting_on_nothing_cost_no_keepalive_until_their_idle_probe() -> None:
    """The collector's 1000 quiet links, default options: nothing waits on any producer, so
    no PING for minutes (was: one per link every keepalive_s, 5 s: 40 000 in 200 s), then
    each link's idle probe once, spread over 225-375 s by its jitter."""
    p, pull, _ = fleet()
    core = p.nodes["c"]
    start = p.now
    seen: list[int] = []
    while p.now < start + 400.0:
        p.now += 2.0
        core.handle_timer(p.now)
        p.run()
        seen.append(sum(1 for src, _, msg in p.log if src == "c" and msg.type == m.PING))
    assert seen[int(220 / 2) - 1] == 0  # none in the first 220 s
    assert seen[-1] == PEERS and pull.pings_sent == PEERS  # each link probed once by 400 s
    firsts = [i for i, n in enumerate(seen) if n]
    assert firsts and 2.0 * (firsts[0] + 1) >= 225.0
    assert pull.timer_looks <= 2 * PEERS  # its deadline came once or twice: no scan
