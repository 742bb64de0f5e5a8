"""The emulated path measures what it was set to: delay, loss, rate; kernel TCP crosses it.
Needs root and /dev/net/tun (skipped otherwise, with the reason)."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from a3m.testing.netem import Impairment, NetPath, unavailable

pytestmark = pytest.mark.skipif(unavailable() is not None, reason=str(unavailable()))

ECHO = r'''
import socket, sys
kind = sys.argv[2]
if kind == "udp":
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind((sys.argv[1], 9000))
    s.settimeout(60)
    print("ready", flush=True)
    while True:
        try:
            d, a = s.recvfrom(65536)
        except socket.timeout:
            break
        if d[:1] == b"e":
            s.sendto(d, a)
else:
    srv = socket.socket(); srv.bind((sys.argv[1], 9000)); srv.listen(1)
    print("ready", flush=True)
    c, _ = srv.accept()
    while (d := c.recv(65536)):
        c.sendall(d)
'''

CLIENT = r'''
import socket, sys, time, json
dst, mode, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
if mode == "ping":
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(float(sys.argv[4]))
    rtts = []
    for i in range(n):
        t = time.perf_counter(); s.sendto(b"e" * 64, (dst, 9000))
        try:
            s.recvfrom(2048); rtts.append(time.perf_counter() - t)
        except socket.timeout:
            pass
    rtts.sort()
    print(json.dumps({"answered": len(rtts), "p50_ms": rtts[len(rtts) // 2] * 1e3}))
elif mode == "blast":
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    for i in range(n):
        s.sendto(b"b" * 1200, (dst, 9000))
        if i % 20 == 0:
            time.sleep(0.0005)
    print(json.dumps({"sent": n}))
else:
    c = socket.create_connection((dst, 9000)); data = b"t" * 100_000
    c.sendall(data); got = b""
    while len(got) < len(data):
        got += c.recv(65536)
    print(json.dumps({"echoed": got == data}))
'''


def run(path: NetPath, kind: str, mode: str, n: int, wait_s: float = 0.3
        ) -> dict[str, float]:
    srv = path.popen("b", [sys.executable, "-c", ECHO, path.addr_b, kind],
                     stdout=subprocess.PIPE, text=True)
    try:
        assert srv.stdout is not None and srv.stdout.readline().strip() == "ready"
        out = subprocess.run(path.argv("a", [sys.executable, "-c", CLIENT, path.addr_b, mode,
                                             str(n), str(wait_s)]), capture_output=True, text=True,
                             timeout=60, check=True)
        result: dict[str, float] = json.loads(out.stdout)
        return result
    finally:
        srv.kill()
        srv.wait()


def test_delay_is_what_it_was_set_to() -> None:
    with NetPath(Impairment(delay_ms=5)) as path:
        r = run(path, "udp", "ping", 100, wait_s=10.0)  # each answer waited for
    assert r["answered"] == 100
    # 2 x 5 ms, never less; plus the forwarder's own time, well under 1 ms on a quiet machine
    # (the bound is generous: a busy machine delays the forwarder's and the echo's turns)
    assert 10.0 <= r["p50_ms"] < 30.0


def test_loss_is_what_it_was_set_to() -> None:
    with NetPath(Impairment(loss=0.2), seed=3) as path:
        run(path, "udp", "ping", 1000, wait_s=0.02)
    ab = path.stats["ab"]
    rate = ab["lost"] / ab["in"]
    assert abs(rate - 0.2) < 4 * (0.2 * 0.8 / ab["in"]) ** 0.5  # within 4 sigma


def test_bursty_loss_comes_in_bursts() -> None:
    imp = Impairment(burst_enter=0.02, burst_exit=0.25)
    with NetPath(imp, seed=4) as path:
        run(path, "udp", "ping", 1000, wait_s=0.02)
    lost = path.stats["ab"]["burst_lost"] / path.stats["ab"]["in"]
    assert 0.03 < lost < 0.15  # stationary share of the bad state: 0.02 / 0.27 = 7.4 %


def test_rate_limit_is_what_it_was_set_to() -> None:
    with NetPath(Impairment(rate_mbit=8, queue_ms=20)) as path:
        t0 = time.monotonic()
        run(path, "udp", "blast", 1500)  # 1.8 MB offered in well under a second
        elapsed = time.monotonic() - t0
    ab = path.stats["ab"]
    carried_mbit = ab["out"] * 1228 * 8 / 1e6
    assert ab["queue_drops"] > 0  # more was offered than the rate carries
    assert carried_mbit / elapsed < 8 * 1.2


def test_kernel_tcp_crosses_the_path() -> None:
    with NetPath(Impairment(delay_ms=2, loss=0.02), seed=5) as path:
        assert run(path, "tcp", "tcp", 0)["echoed"] is True
