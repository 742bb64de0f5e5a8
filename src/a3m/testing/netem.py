"""An emulated network path in user space: two network namespaces joined through TUN devices.

The kernel here has no netem, so a forwarder process holds one TUN device in each namespace
and carries every IP packet across, applying per direction: delay and jitter, random loss,
bursty loss (Gilbert-Elliott), duplication, reordering and a rate limit with a tail-drop queue.
Kernel TCP (pyzmq, pynng) and A3M's UDP cross the same impaired path::

    with NetPath(Impairment(delay_ms=5, loss=0.05, rate_mbit=100)) as path:
        server = path.popen("b", [sys.executable, "-m", "some.server", path.addr_b])
        client = path.popen("a", [sys.executable, "-m", "some.client", path.addr_b])

It needs root and ``/dev/net/tun`` (:func:`unavailable` says why not, so tests can skip). The
namespaces are created with iproute2's ``ip`` (present wherever namespaces are; it keeps the
set-up readable as the commands one would type) and always removed on exit.

:class:`LossyLoopback` is the simpler mode: one namespace whose loopback drops a share of
input packets with ``nft`` (needs the nftables package), no delay.
"""

from __future__ import annotations

import fcntl
import heapq
import itertools
import json
import os
import random
import select
import shutil
import struct
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, replace
from typing import Any

TUNSETIFF = 0x400454CA
IFF_TUN = 0x0001
IFF_NO_PI = 0x1000
_counter = itertools.count()


class NetemUnavailable(RuntimeError):
    """The emulated path cannot be built here (not root, no TUN, no ``ip``, no ``nft``)."""


@dataclass(frozen=True)
class Impairment:
    """What one direction of the path does to packets. Times in milliseconds, rates in
    Mbit/s, probabilities in 0..1."""

    delay_ms: float = 0.0
    jitter_ms: float = 0.0  # uniform in [-jitter, +jitter], never below zero delay
    loss: float = 0.0  # independent random loss
    #: Gilbert-Elliott bursty loss: chance per packet to enter the bad state, to leave it,
    #: and the loss rate while in it (0 disables).
    burst_enter: float = 0.0
    burst_exit: float = 0.3
    burst_loss: float = 1.0
    dup: float = 0.0
    reorder: float = 0.0  # chance that a packet is held back by ``reorder_ms`` more
    reorder_ms: float = 2.0
    rate_mbit: float = 0.0  # 0 = unlimited
    queue_ms: float = 50.0  # the rate limiter's queue, in milliseconds of transmission


#: The loss models :func:`model_path` builds (``a3m bench pushpull --loss-model``).
MODELS = ("random", "burst", "data", "ack", "queue", "jitter")


def model_path(model: str, loss: float, delay_ms: float = 0.0, jitter_ms: float = 0.0,
               rate_mbit: float = 0.0, burst_len: float = 3.0, queue_ms: float = 2.0
               ) -> tuple[Impairment, Impairment]:
    """The two directions (a -> b, b -> a) of a path losing ``loss`` (0..1) the way
    ``model`` says. Side ``a`` is the client or sender, ``b`` the server or receiver, so
    a -> b carries requests and data, b -> a replies and acknowledgements:

    - ``random``: each packet is lost independently, both ways;
    - ``burst``: Gilbert-Elliott, both ways: a good state that loses nothing and a bad one
      that loses everything, left with chance 1 / ``burst_len`` a packet (bursts of
      ``burst_len`` packets on average) and entered so that the share of time in it, and
      so the loss rate, is ``loss``;
    - ``data``: random loss a -> b only (data and requests; ACKs all arrive);
    - ``ack``: random loss b -> a only (ACKs and replies; all data arrives);
    - ``queue``: random loss both ways and a rate limit (``rate_mbit``, 100 if none) whose
      queue holds only ``queue_ms`` of transmission: what arrives at a full queue is dropped;
    - ``jitter``: random loss both ways and each packet's delay drawn in
      ``delay_ms`` +- ``jitter_ms`` (1 ms if none), which reorders packets sent closer
      together than the spread.
    """
    if model not in MODELS:
        raise ValueError(f"unknown loss model {model!r} (one of {', '.join(MODELS)})")
    if not 0 <= loss < 1:
        raise ValueError("loss must be within 0..1")
    base = Impairment(delay_ms=delay_ms, jitter_ms=jitter_ms, rate_mbit=rate_mbit)
    lossy = replace(base, loss=loss)
    if model == "random":
        return lossy, lossy
    if model == "burst":
        if burst_len < 1:
            raise ValueError("a burst is at least one packet long")
        leave = 1 / burst_len
        bursty = replace(base, burst_enter=loss * leave / (1 - loss), burst_exit=leave,
                         burst_loss=1.0)
        return bursty, bursty
    if model == "data":
        return lossy, base
    if model == "ack":
        return base, lossy
    if model == "queue":
        shallow = replace(lossy, rate_mbit=rate_mbit or 100.0, queue_ms=queue_ms)
        return shallow, shallow
    jittery = replace(lossy, jitter_ms=jitter_ms or 1.0)
    return jittery, jittery


def unavailable() -> str | None:
    """Why the emulated path cannot run here, or None if it can."""
    if sys.platform != "linux":
        return "network namespaces need Linux"
    if os.geteuid() != 0:
        return "the emulated path needs root (network namespaces and TUN devices)"
    if not os.path.exists("/dev/net/tun"):
        return "no /dev/net/tun"
    if shutil.which("ip") is None:
        return "iproute2's ip command is missing"
    return None


def nft_unavailable() -> str | None:
    """Why :class:`LossyLoopback` cannot run here, or None if it can."""
    why = unavailable()
    if why is not None and "TUN" not in why and "tun" not in why:
        return why
    if shutil.which("nft") is None:
        return "nft is missing (apt package nftables)"
    return None


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True)


def _tun_open(name: str) -> int:
    fd = os.open("/dev/net/tun", os.O_RDWR | os.O_NONBLOCK)
    fcntl.ioctl(fd, TUNSETIFF, struct.pack("16sH", name.encode(), IFF_TUN | IFF_NO_PI))
    return fd


class NetPath:
    """Namespaces ``a`` and ``b`` joined by an impaired path (``ab``: a -> b, ``ba``: back;
    one :class:`Impairment` applies both ways unless ``ba`` is given)."""

    def __init__(self, ab: Impairment | None = None, ba: Impairment | None = None,
                 seed: int = 1, mtu: int = 1500) -> None:
        why = unavailable()
        if why is not None:
            raise NetemUnavailable(why)
        self.ab = ab or Impairment()
        self.ba = ba or self.ab
        self.seed = seed
        self.mtu = mtu
        n = next(_counter)
        tag = f"{os.getpid() % 100000}{n}"
        self.ns_a, self.ns_b = f"a3m-netem-{tag}-a", f"a3m-netem-{tag}-b"
        self._ifa, self._ifb = f"a3t{tag}a"[:15], f"a3t{tag}b"[:15]
        k = (os.getpid() + 7 * n) % 250 + 1
        self.addr_a, self.addr_b = f"10.77.{k}.1", f"10.77.{k}.2"
        self._fds: list[int] = []
        self._fwd: subprocess.Popen[str] | None = None
        self.stats: dict[str, Any] = {}

    def __enter__(self) -> NetPath:
        try:
            self._setup()
        except BaseException:
            self._teardown()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self._teardown()

    def _setup(self) -> None:
        for ns, ifname, mine, peer in ((self.ns_a, self._ifa, self.addr_a, self.addr_b),
                                       (self.ns_b, self._ifb, self.addr_b, self.addr_a)):
            _ip("netns", "add", ns)
            _ip("-n", ns, "link", "set", "lo", "up")
            fd = _tun_open(ifname)
            self._fds.append(fd)
            _ip("link", "set", ifname, "netns", ns)
            _ip("-n", ns, "addr", "add", mine, "peer", peer, "dev", ifname)
            _ip("-n", ns, "link", "set", ifname, "mtu", str(self.mtu), "up")
        params = json.dumps({"ab": asdict(self.ab), "ba": asdict(self.ba), "seed": self.seed})
        self._fwd = subprocess.Popen(
            [sys.executable, "-m", "a3m.testing.netem", str(self._fds[0]), str(self._fds[1]),
             params], pass_fds=self._fds, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            text=True)

    def _teardown(self) -> None:
        fwd, self._fwd = self._fwd, None
        if fwd is not None:
            try:
                out, _ = fwd.communicate("", timeout=5)
                self.stats = json.loads(out) if out.strip() else {}
            except (subprocess.TimeoutExpired, ValueError):
                fwd.kill()
                fwd.wait()
        for fd in self._fds:
            os.close(fd)
        self._fds = []
        for ns in (self.ns_a, self.ns_b):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)

    def argv(self, side: str, argv: list[str]) -> list[str]:
        """``argv`` run inside namespace ``side`` ("a" or "b")."""
        return ["ip", "netns", "exec", self.ns_a if side == "a" else self.ns_b, *argv]

    def popen(self, side: str, argv: list[str], **kwargs: Any) -> subprocess.Popen[Any]:
        """Start ``argv`` inside namespace ``side``."""
        return subprocess.Popen(self.argv(side, argv), **kwargs)

    def describe(self) -> dict[str, Any]:
        """The path's settings (for benchmark reports)."""
        return {"kind": "tun", "ab": asdict(self.ab), "ba": asdict(self.ba),
                "addr_a": self.addr_a, "addr_b": self.addr_b, "mtu": self.mtu}


class LossyLoopback:
    """One namespace whose loopback drops ``loss_pct`` percent of input packets at random
    (nft ``numgen random``): both ends run in it (``side`` is ignored), no delay."""

    def __init__(self, loss_pct: float) -> None:
        why = nft_unavailable()
        if why is not None:
            raise NetemUnavailable(why)
        self.loss_pct = loss_pct
        self.ns = f"a3m-lossy-{os.getpid() % 100000}{next(_counter)}"
        self.addr_a = self.addr_b = "127.0.0.1"
        self.stats: dict[str, Any] = {}

    def __enter__(self) -> LossyLoopback:
        _ip("netns", "add", self.ns)
        try:
            _ip("-n", self.ns, "link", "set", "lo", "up")
            if self.loss_pct > 0:
                rules = ("table inet lossy {\n chain input {\n  type filter hook input "
                         "priority 0;\n  numgen random mod 10000 < "
                         f"{round(self.loss_pct * 100)} counter drop\n }}\n}}\n")
                subprocess.run(["ip", "netns", "exec", self.ns, "nft", "-f", "-"], input=rules,
                               text=True, check=True, capture_output=True)
        except BaseException:
            subprocess.run(["ip", "netns", "del", self.ns], capture_output=True)
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        out = subprocess.run(["ip", "netns", "exec", self.ns, "nft", "list", "ruleset"],
                             capture_output=True, text=True).stdout
        for word in out.split("counter packets ")[1:2]:
            self.stats = {"dropped": int(word.split()[0])}
        subprocess.run(["ip", "netns", "del", self.ns], capture_output=True)

    def argv(self, side: str, argv: list[str]) -> list[str]:
        return ["ip", "netns", "exec", self.ns, *argv]

    def popen(self, side: str, argv: list[str], **kwargs: Any) -> subprocess.Popen[Any]:
        return subprocess.Popen(self.argv(side, argv), **kwargs)

    def describe(self) -> dict[str, Any]:
        return {"kind": "nft-loopback", "loss_pct": self.loss_pct}


def veth_unavailable() -> str | None:
    """Why :class:`VethPath` cannot run here, or None if it can (no TUN needed)."""
    if sys.platform != "linux":
        return "network namespaces need Linux"
    if os.geteuid() != 0:
        return "a veth pair between network namespaces needs root"
    if shutil.which("ip") is None:
        return "iproute2's ip command is missing"
    return None


class VethPath:
    """Namespaces ``a`` and ``b`` joined by a veth pair at ``mtu``: a real kernel path both
    ways (queues, segmentation, drops), no emulator in between, so what a 1500-byte
    Ethernet link costs shows without loopback's 64 KiB datagrams. Removed on exit (also
    on error and Ctrl-C: the namespaces go, and the veth pair with them)."""

    def __init__(self, mtu: int = 1500) -> None:
        why = veth_unavailable()
        if why is not None:
            raise NetemUnavailable(why)
        if not 576 <= mtu <= 65535:
            raise ValueError("mtu must be within 576..65535")
        self.mtu = mtu
        n = next(_counter)
        tag = f"{os.getpid() % 100000}{n}"
        self.ns_a, self.ns_b = f"a3m-veth-{tag}-a", f"a3m-veth-{tag}-b"
        self._ifa, self._ifb = f"a3v{tag}a"[:15], f"a3v{tag}b"[:15]
        k = (os.getpid() + 7 * n) % 250 + 1
        self.addr_a, self.addr_b = f"10.78.{k}.1", f"10.78.{k}.2"
        self.stats: dict[str, Any] = {}

    def __enter__(self) -> VethPath:
        try:
            _ip("netns", "add", self.ns_a)
            _ip("netns", "add", self.ns_b)
            _ip("link", "add", self._ifa, "netns", self.ns_a, "type", "veth", "peer", "name",
                self._ifb, "netns", self.ns_b)
            for ns, ifname, mine in ((self.ns_a, self._ifa, self.addr_a),
                                     (self.ns_b, self._ifb, self.addr_b)):
                _ip("-n", ns, "link", "set", "lo", "up")
                _ip("-n", ns, "addr", "add", f"{mine}/24", "dev", ifname)
                _ip("-n", ns, "link", "set", ifname, "mtu", str(self.mtu), "up")
        except BaseException:
            self._teardown()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self.stats = {"a": self.udp_counters("a"), "b": self.udp_counters("b")}
        finally:
            self._teardown()

    def _teardown(self) -> None:
        for ns in (self.ns_a, self.ns_b):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)

    def udp_counters(self, side: str) -> dict[str, int]:
        """The kernel's UDP counters of namespace ``side`` (``/proc/net/snmp``, which is per
        namespace): ``RcvbufErrors`` are datagrams dropped at a full receive buffer."""
        out = subprocess.run(self.argv(side, ["cat", "/proc/net/snmp"]), capture_output=True,
                             text=True).stdout
        rows = [line.split()[1:] for line in out.splitlines() if line.startswith("Udp:")]
        if len(rows) < 2:
            return {}
        return {k: int(v) for k, v in zip(rows[0], rows[1], strict=False)
                if v.lstrip("-").isdigit()}

    def argv(self, side: str, argv: list[str]) -> list[str]:
        """``argv`` run inside namespace ``side`` ("a" or "b")."""
        return ["ip", "netns", "exec", self.ns_a if side == "a" else self.ns_b, *argv]

    def popen(self, side: str, argv: list[str], **kwargs: Any) -> subprocess.Popen[Any]:
        """Start ``argv`` inside namespace ``side``."""
        return subprocess.Popen(self.argv(side, argv), **kwargs)

    def describe(self) -> dict[str, Any]:
        """The path's settings (for benchmark reports)."""
        return {"kind": "veth", "mtu": self.mtu, "addr_a": self.addr_a, "addr_b": self.addr_b}


# ---------------------------------------------------------------------- the forwarder


class _Direction:
    """One direction's impairment state and counters."""

    def __init__(self, imp: Impairment, out_fd: int, rng: random.Random) -> None:
        self.imp = imp
        self.out_fd = out_fd
        self.rng = rng
        self.bad = False
        self.next_free = 0.0  # when the rate limiter's link is free again
        self.bytes_per_s = imp.rate_mbit * 125_000
        self.queue_s = imp.queue_ms / 1000
        self.counts = {"in": 0, "out": 0, "lost": 0, "burst_lost": 0, "queue_drops": 0,
                       "duplicated": 0, "reordered": 0}

    def admit(self, pkt: bytes, now: float) -> list[float]:
        """When each copy of ``pkt`` should leave (empty: dropped)."""
        imp, rng, c = self.imp, self.rng, self.counts
        c["in"] += 1
        if imp.burst_enter:
            if self.bad:
                self.bad = rng.random() >= imp.burst_exit
            else:
                self.bad = rng.random() < imp.burst_enter
            if self.bad and rng.random() < imp.burst_loss:
                c["burst_lost"] += 1
                return []
        if imp.loss and rng.random() < imp.loss:
            c["lost"] += 1
            return []
        t = now
        if self.bytes_per_s:
            start = max(now, self.next_free)
            if start - now > self.queue_s:
                c["queue_drops"] += 1
                return []
            self.next_free = start + len(pkt) / self.bytes_per_s
            t = self.next_free
        copies = 2 if imp.dup and rng.random() < imp.dup else 1
        if copies == 2:
            c["duplicated"] += 1
        out = []
        for _ in range(copies):
            d = imp.delay_ms
            if imp.jitter_ms:
                d = max(0.0, d + rng.uniform(-imp.jitter_ms, imp.jitter_ms))
            if imp.reorder and rng.random() < imp.reorder:
                d += imp.reorder_ms
                c["reordered"] += 1
            out.append(t + d / 1000)
        return out


def forward(fd_a: int, fd_b: int, ab: Impairment, ba: Impairment, seed: int,
            control: int) -> dict[str, Any]:
    """Carry packets between the two TUN fds until ``control`` reaches end of file."""
    rng = random.Random(seed)
    dirs = {fd_a: _Direction(ab, fd_b, rng), fd_b: _Direction(ba, fd_a, rng)}
    heap: list[tuple[float, int, int, bytes]] = []
    seq = itertools.count()
    clock = time.monotonic
    watch = [fd_a, fd_b, control]
    while True:
        now = clock()
        while heap and heap[0][0] <= now:
            _, _, out_fd, pkt = heapq.heappop(heap)
            try:
                os.write(out_fd, pkt)
                dirs[fd_b if out_fd == fd_a else fd_a].counts["out"] += 1
            except OSError:
                pass
        wait = max(0.0, heap[0][0] - now) if heap else 1.0
        ready, _, _ = select.select(watch, [], [], wait)
        now = clock()
        for fd in ready:
            if fd == control:
                if not os.read(control, 4096):
                    return {"ab": dirs[fd_a].counts, "ba": dirs[fd_b].counts}
                continue
            d = dirs[fd]
            for _ in range(256):
                try:
                    pkt = os.read(fd, 65536)
                except BlockingIOError:
                    break
                except OSError:
                    break
                for t in d.admit(pkt, now):
                    heapq.heappush(heap, (t, next(seq), d.out_fd, pkt))


def _main(argv: list[str]) -> None:
    fd_a, fd_b, params = int(argv[0]), int(argv[1]), json.loads(argv[2])
    stats = forward(fd_a, fd_b, Impairment(**params["ab"]), Impairment(**params["ba"]),
                    params["seed"], sys.stdin.fileno())
    print(json.dumps(stats), flush=True)


if __name__ == "__main__":
    _main(sys.argv[1:])
