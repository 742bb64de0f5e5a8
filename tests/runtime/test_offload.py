"""UDP segmentation offload (a3m.runtime.offload): the batches the sends are grouped into,
the datagrams rebuilt from a coalesced read, the fallback when the kernel refuses, and a
real exchange over loopback with GSO and GRO on."""

from __future__ import annotations

import errno
import socket
from typing import Any

import pytest

import a3m
from a3m.runtime.offload import (
    GSO_MAX_SEGMENTS,
    SOL_UDP,
    UDP_GRO,
    UDP_SEGMENT,
    UdpOffload,
    gro_segment,
    gso_batches,
    gso_supported,
    split_gro,
)

A, B = ("10.0.0.1", 1), ("10.0.0.2", 2)


def test_split_gro_rebuilds_equal_datagrams_and_the_short_last_one() -> None:
    datagrams = [bytes([i]) * 1400 for i in range(5)] + [b"z" * 333]
    assert split_gro(b"".join(datagrams), 1400) == datagrams
    equal = [bytes([i]) * 1200 for i in range(4)]
    assert split_gro(memoryview(b"".join(equal)), 1200) == equal
    assert split_gro(b"x" * 900, 1400) == [b"x" * 900]  # one datagram: not coalesced
    assert split_gro(b"x" * 900, 0) == [b"x" * 900]


def test_gro_segment_reads_the_ancillary_data() -> None:
    assert gro_segment([(SOL_UDP, UDP_GRO, (1400).to_bytes(4, "little"))]) == 1400
    assert gro_segment([(socket.SOL_SOCKET, 1, b"\0\0\0\0")]) == 0
    assert gro_segment([]) == 0


def test_batches_group_equal_sizes_to_one_address_in_order() -> None:
    out = [(b"a" * 1400, A)] * 3 + [(b"b" * 700, A)] + [(b"c" * 1400, A)] * 2 + \
          [(b"d" * 1400, B)] + [(b"e" * 1400, A)]
    batches = gso_batches(out)
    assert [(addr, seg, [len(d) for d in parts]) for addr, seg, parts in batches] == [
        (A, 1400, [1400, 1400, 1400, 700]),  # the short one ends its batch
        (A, 1400, [1400, 1400]),
        (B, 1400, [1400]),  # another address: never jumped over
        (A, 1400, [1400]),
    ]
    assert [d for _, _, parts in batches for d in parts] == [d for d, _ in out]


def test_a_larger_datagram_starts_a_new_batch_and_limits_hold() -> None:
    out = [(b"x" * 500, A), (b"y" * 1000, A), (b"z" * 1000, A)]
    assert [len(p) for _, _, p in gso_batches(out)] == [1, 2]
    many = [(b"x" * 100, A)] * (GSO_MAX_SEGMENTS + 5)
    assert [len(p) for _, _, p in gso_batches(many)] == [GSO_MAX_SEGMENTS, 5]
    big = [(b"x" * 1400, A)] * 60
    batches = gso_batches(big, max_bytes=65000)
    assert all(sum(map(len, p)) <= 65000 for _, _, p in batches)
    assert sum(len(p) for _, _, p in batches) == 60


class RefusingSocket:
    """A socket whose segmented send fails the way a kernel or device refuses GSO (only
    this failure path is faked; the real path is tested over loopback below)."""

    family = socket.AF_INET

    def __init__(self, code: int) -> None:
        self.code = code
        self.sent: list[tuple[bytes, Any]] = []
        self.sendmsg_calls = 0

    def getsockopt(self, level: int, name: int) -> int:
        return 0

    def setsockopt(self, level: int, name: int, value: int) -> None:
        pass

    def sendmsg(self, buffers: list[bytes], anc: list[Any], flags: int, addr: Any) -> int:
        self.sendmsg_calls += 1
        raise OSError(self.code, "refused")

    def sendto(self, data: bytes, addr: Any) -> int:
        self.sent.append((data, addr))
        return len(data)

    def recvmsg_into(self, *args: Any) -> Any:
        raise BlockingIOError


@pytest.mark.parametrize("code", [errno.EIO, errno.EINVAL])
def test_a_refused_segmented_send_falls_back_and_turns_gso_off(code: int) -> None:
    sock = RefusingSocket(code)
    off = UdpOffload(sock, gro=False)  # type: ignore[arg-type]
    assert off.gso
    out = [(bytes([i]) * 1000, A) for i in range(6)]
    assert off.send(out) == 0
    assert sock.sent == out  # every datagram left, in order, one per call
    assert not off.gso and off.gso_refused == 1 and sock.sendmsg_calls == 1
    assert off.send(out) == 0  # no segmented send tried again
    assert sock.sendmsg_calls == 1 and sock.sent == out + out


def test_another_error_is_counted_not_a_fallback() -> None:
    sock = RefusingSocket(errno.ECONNREFUSED)
    off = UdpOffload(sock, gro=False)  # type: ignore[arg-type]
    assert off.send([(b"x" * 100, A)] * 4) == 4
    assert off.gso and sock.sent == []


def _pair() -> tuple[socket.socket, socket.socket]:
    rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    rx.bind(("127.0.0.1", 0))
    tx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    tx.bind(("127.0.0.1", 0))
    return tx, rx


@pytest.mark.skipif(not gso_supported(socket.socket(socket.AF_INET, socket.SOCK_DGRAM)),
                    reason="the kernel has no UDP_SEGMENT")
def test_segmented_sends_arrive_as_the_same_datagrams() -> None:
    """A real exchange: one sendmsg carries 10 datagrams; the reader (GRO on or off) gives
    back exactly the datagrams sent, boundaries included."""
    for gro in (True, False):
        tx, rx = _pair()
        try:
            sender, receiver = UdpOffload(tx), UdpOffload(rx, gso=False, gro=gro)
            dst = rx.getsockname()
            out = [(bytes([i]) * 1200, dst) for i in range(9)] + [(b"!" * 77, dst)]
            assert sender.send(out) == 0
            assert sender.gso_sends == 1 and sender.gso_datagrams == 10
            rx.settimeout(2)
            read = receiver.reader(bytearray(65536))
            got: list[bytes] = []
            while len(got) < 10:
                got.extend(d for d, _ in read())
            assert got == [d for d, _ in out]
        finally:
            tx.close()
            rx.close()


def test_the_options_are_the_kernels_numbers() -> None:
    assert (SOL_UDP, UDP_SEGMENT, UDP_GRO) == (17, 103, 104)


@pytest.mark.parametrize("value, gso, gro", [
    (None, False, False), ("off", False, False), ("0", False, False), ("gso", True, False),
    ("gro", False, True), ("on", True, True),
])
def test_the_environment_turns_offload_on(monkeypatch: pytest.MonkeyPatch, value: str | None,
                                          gso: bool, gro: bool) -> None:
    from a3m.runtime.offload import offload_for

    if value is None:
        monkeypatch.delenv("A3M_UDP_OFFLOAD", raising=False)
        if a3m.NATIVE:  # unset: the native path's own default
            from a3m.runtime.offload import NATIVE_OFFLOAD

            gso, gro = NATIVE_OFFLOAD in ("on", "gso"), NATIVE_OFFLOAD in ("on", "gro")
    else:
        monkeypatch.setenv("A3M_UDP_OFFLOAD", value)
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        off = offload_for(sock)
        have = gso_supported(sock)
        assert (off.gso, off.gro) == (gso and have, gro and have)
    finally:
        sock.close()


@pytest.mark.skipif(not gso_supported(socket.socket(socket.AF_INET, socket.SOCK_DGRAM)),
                    reason="the kernel has no UDP_SEGMENT")
def test_a_stream_with_offload_on_is_exact(monkeypatch: pytest.MonkeyPatch) -> None:
    """Both nodes with GSO and GRO, 1400-byte datagrams on loopback (as on Ethernet): 64 KiB
    messages go as ~47 fragments, grouped into segmented sends and read back coalesced;
    every message arrives once, whole."""
    import a3m

    monkeypatch.setenv("A3M_UDP_OFFLOAD", "on")
    n, size = 60, 65536
    with a3m.Node("gso-rx", bind="127.0.0.1:0", loopback_datagram_size=0) as rx, \
            a3m.Node("gso-tx", bind="127.0.0.1:0", loopback_datagram_size=0) as tx:
        pull = rx.socket(a3m.PULL, "in")
        tx.associate("gso-rx", rx.address)
        push = tx.socket(a3m.PUSH, "out")
        push.link(("gso-rx", "in"))
        assert push.wait_linked(timeout=10)
        for i in range(n):
            push.send(i.to_bytes(4, "big") * (size // 4), timeout=10)
        got = [pull.recv(timeout=10) for _ in range(n)]
        assert got == [i.to_bytes(4, "big") * (size // 4) for i in range(n)]
        sent, read = tx._driver._io, rx._driver._io
        assert sent.gso and read.gro
        assert sent.gso_sends > 0 and read.gro_reads > 0  # the offload path did the work
