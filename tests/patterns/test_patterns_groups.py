"""Socket groups over real UDP: RADIO / DISH between nodes of this process and of other
processes, the asyncio forms, discovery, the errors. (Faults, joins and leaves under loss:
tests/sim/test_sim_groups.py.)"""

from __future__ import annotations

import asyncio
import multiprocessing as mp
import threading
import time
from pathlib import Path
from typing import Any

import pytest

import a3m
import a3m.aio
from a3m.patterns.groups import DIRECTORY_TAG

T = 30.0  # a bound for a condition waited on, only reached when something is wrong


@pytest.fixture
def nodes() -> Any:
    made: list[a3m.Node] = []

    def make(name: str, **kw: Any) -> a3m.Node:
        node = a3m.Node(name, **kw)
        made.append(node)
        return node

    yield make
    for node in made:
        node.close(timeout=5)


def take(socks: list[a3m.Socket], n: int) -> list[list[a3m.ReceivedMessage]]:
    """What ``socks`` receive until ``n`` in all (bounded by T), then any extra (``drain``):
    the count waited for, not a quiet spell a slow machine could leave early."""
    out: list[list[a3m.ReceivedMessage]] = [[] for _ in socks]
    deadline = time.monotonic() + T
    while sum(map(len, out)) < n and time.monotonic() < deadline:
        for got, sock in zip(out, socks, strict=True):
            try:
                got.append(sock.recv_msg(timeout=0.01))
            except a3m.Timeout:
                pass
    for got, sock in zip(out, socks, strict=True):
        got.extend(drain(sock))
    return out


def drain(sock: a3m.Socket, wait: float = 0.3) -> list[a3m.ReceivedMessage]:
    out = []
    while True:
        try:
            out.append(sock.recv_msg(timeout=wait))
        except a3m.Timeout:
            return out


def test_radio_reaches_members_it_finds_by_itself_all_and_one(nodes: Any) -> None:
    radio_node = nodes("radio")
    dish_nodes = [nodes(f"dish-{i}") for i in range(3)]
    dishes = []
    for i, n in enumerate(dish_nodes):
        d = n.socket(a3m.DISH, "in")
        d.join("sensors")
        if i < 2:
            d.join("alerts")
        dishes.append(d)
    radio = radio_node.socket(a3m.RADIO, "out")
    for n in dish_nodes:  # no link() per member: associations are enough
        radio_node.associate(n.id, n.address)
    want = {a3m.SocketId(n.id, "in") for n in dish_nodes}
    deadline = time.monotonic() + T
    while set(radio.members("sensors")) != want and time.monotonic() < deadline:
        radio.members("sensors", timeout=0.05)
    assert set(radio.members("sensors")) == want
    assert set(radio.members("alerts", timeout=T)) <= want
    for i in range(50):
        radio.send(b"all-%d" % i, group="sensors")  # ALL is the default
    for d in dishes:
        got = take([d], 50)[0]
        assert [m.payload for m in got] == [b"all-%d" % i for i in range(50)]
        assert {m.group for m in got} == {"sensors"}
        assert {m.source for m in got} == {a3m.SocketId("radio", "out")}
    while len(radio.members("alerts")) < 2:
        radio.members("alerts", timeout=0.05)
    for i in range(60):
        radio.send(b"one-%d" % i, group="alerts", strategy=a3m.ONE)
    per = [[m.payload for m in got] for got in take(dishes, 60)]
    assert sorted(p for ps in per for p in ps) == sorted(b"one-%d" % i for i in range(60))
    assert per[2] == [] and per[0] and per[1]  # only members, load-balanced over both


def test_empty_group_waits_or_says_so_and_misuse_is_refused(nodes: Any) -> None:
    node = nodes("lonely")
    radio = node.socket(a3m.RADIO)
    with pytest.raises(a3m.WouldBlock, match="no members"):
        radio.send(b"x", group="nobody", timeout=0)
    with pytest.raises(a3m.Timeout, match="no members"):
        radio.send(b"x", group="nobody", timeout=0.2)
    radio.set_option("no_members", "error")
    with pytest.raises(a3m.NoMembers):
        radio.send(b"x", group="nobody")
    assert radio.members("nobody", timeout=0.1) == []
    with pytest.raises(a3m.UsageError):
        radio.send(b"x")  # no group
    with pytest.raises(a3m.UsageError):
        radio.send(b"x", group="g", strategy="SOME")
    with pytest.raises(a3m.UsageError):
        radio.send(b"x", group="g" * 256)
    with pytest.raises(a3m.UsageError):
        radio.set_option("strategy", "MANY")
    with pytest.raises(a3m.UsageError):
        radio.recv(timeout=0)
    dish = node.socket(a3m.DISH)
    with pytest.raises(a3m.UsageError):
        dish.send(b"x", timeout=0)
    with pytest.raises(a3m.UsageError):
        dish.leave("never-joined")
    with pytest.raises(a3m.UsageError):
        node.socket(a3m.PUSH, DIRECTORY_TAG)  # the directory's tag is taken on every node


def test_local_dish_and_group_default_strategy(nodes: Any) -> None:
    node = nodes("both")
    a = node.socket(a3m.DISH, "a")
    b = node.socket(a3m.DISH, "b")
    a.join("jobs")
    b.join("jobs")
    radio = node.socket(a3m.RADIO, group_strategies={"jobs": a3m.ONE})
    assert radio.get_option("group_strategies") == {"jobs": "ONE"}
    while len(radio.members("jobs", timeout=T)) < 2:
        time.sleep(0.01)
    for i in range(20):
        radio.send(b"%d" % i, group="jobs")  # the group's default: ONE
    got = [m for ms in take([a, b], 20) for m in ms]
    assert sorted(m.payload for m in got) == sorted(b"%d" % i for i in range(20))


def test_leaving_and_closing_members_mid_send_lose_nothing(nodes: Any) -> None:
    radio_node = nodes("r")
    ds = [nodes(f"m{i}") for i in range(3)]
    socks = []
    for n in ds:
        s = n.socket(a3m.DISH, "in")
        s.join("g")
        socks.append(s)
        radio_node.associate(n.id, n.address)
    radio = radio_node.socket(a3m.RADIO, strategy=a3m.ONE)
    while len(radio.members("g", timeout=T)) < 3:
        time.sleep(0.01)
    closing = threading.Thread(target=socks[1].close, kwargs={"timeout": T})
    for i in range(300):
        radio.send(b"%d" % i, group="g")
        if i == 100:
            socks[0].leave("g")
        if i == 200:
            closing.start()  # closes while messages to it are in flight
    closing.join(T)
    # What was sent to the closing DISH reached it before its links closed (the unlink's
    # delivery goal): the others got the rest, each message once.
    closed_got = socks[1]._core.stats["received"]
    received = [m.payload for ms in take([socks[0], socks[2]], 300 - closed_got) for m in ms]
    assert len(received) + closed_got == 300
    assert len(set(received)) == len(received)


def dish_process(addr_q: Any, radio_addr: tuple[str, int], done: Any, n: int) -> None:
    """Child: a node with a DISH in group "g"; reports what it received."""
    try:
        with a3m.Node(f"child-{mp.current_process().pid}") as node:
            node.associate("parent", radio_addr)
            dish = node.socket(a3m.DISH, "in")
            dish.join("g")
            addr_q.put((node.id, node.address))
            got = [dish.recv(timeout=60) for _ in range(n)]
            done.put((node.id, got))
            node.flush(timeout=10)
    except Exception as exc:
        done.put(("error", repr(exc)))


def test_radio_across_processes() -> None:
    ctx = mp.get_context("spawn")
    n = 200
    with a3m.Node("parent") as node:
        radio = node.socket(a3m.RADIO, "out")
        addr_q: Any = ctx.Queue()
        done: Any = ctx.Queue()
        procs = [ctx.Process(target=dish_process, args=(addr_q, node.address, done, n),
                             daemon=True) for _ in range(2)]
        for p in procs:
            p.start()
        try:
            for _ in procs:
                cid, addr = addr_q.get(timeout=60)
                node.associate(cid, tuple(addr))
            deadline = time.monotonic() + 30
            while len(radio.members("g", timeout=1)) < 2 and time.monotonic() < deadline:
                pass
            assert len(radio.members("g")) == 2
            radio.send_many([b"%d" % i for i in range(n)], group="g", timeout=30)
            results = dict(done.get(timeout=60) for _ in procs)
            assert "error" not in results, results
            for got in results.values():
                assert got == [b"%d" % i for i in range(n)]
        finally:
            for p in procs:
                p.join(30)


def test_members_found_through_a_discovery_file(tmp_path: Path, nodes: Any) -> None:
    d = nodes("found")
    dish = d.socket(a3m.DISH, "in")
    dish.join("g")
    directory = tmp_path / "nodes.csv"
    host, port = d.address
    directory.write_text(f"found,{host},{port}\n")
    r = nodes("seeker", discovery=str(directory))
    radio = r.socket(a3m.RADIO)
    assert radio.members("g", timeout=T) == [a3m.SocketId("found", "in")]
    radio.send(b"hello", group="g")
    assert dish.recv_msg(timeout=T).group == "g"


def test_asyncio_forms() -> None:
    async def main() -> None:
        async with a3m.aio.Node("aio-r") as r, a3m.aio.Node("aio-d") as d:
            dish = d.socket(a3m.DISH, "in")
            dish.join("g")
            r.associate("aio-d", d.address)
            radio = r.socket(a3m.RADIO)
            assert await radio.members("g", timeout=T) == [a3m.SocketId("aio-d", "in")]
            await radio.send(b"x", group="g", strategy=a3m.ALL, timeout=T)
            msg = await dish.recv_msg(timeout=T)
            assert (msg.payload, msg.group) == (b"x", "g")
            dish.leave("g")
            deadline = time.monotonic() + T
            while await radio.members("g", timeout=0) and time.monotonic() < deadline:
                await asyncio.sleep(0.01)
            assert await radio.members("g", timeout=0.1) == []

    asyncio.run(asyncio.wait_for(main(), 60))


def test_bench_groups_counts_every_member_exactly(tmp_path: Path) -> None:
    from a3m.benchmarks import groups

    result = groups.run_groups(messages=600, size=64, members=(1, 3))
    assert result["exact"] and len(result["runs"]) == 4
    assert {(r["kind"], r["members"]) for r in result["runs"]} == {
        ("RADIO/DISH ALL", 1), ("PUB/SUB", 1), ("RADIO/DISH ALL", 3), ("PUB/SUB", 3)}
    assert all(r["msgs_per_s_per_member"] > 0 for r in result["runs"])
    assert set(result["radio_vs_pubsub"]) == {"1", "3"}
    assert Path(groups.plot(result, str(tmp_path / "g.png"))).stat().st_size > 1000
