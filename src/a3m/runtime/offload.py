"""UDP segmentation offload (Linux): fewer system calls per byte, the same datagrams.

On send, ``UDP_SEGMENT`` (GSO): one ``sendmsg`` hands the kernel up to 64 KiB of datagrams of
one size to one address (the last may be shorter), and the kernel (or the NIC) cuts them. On
receive, ``UDP_GRO``: the kernel may hand over several datagrams of one flow in one read, with
their size in the ancillary data, and :func:`split_gro` cuts them apart again. Each datagram
stays what the protocol made (separately sealed, numbered, acknowledged): a lost segment is
one lost datagram. Only the system calls change.

Both drivers (``a3m.runtime.driver`` and ``a3m.aio.driver``) use what :func:`offload_for` gives:
the native data plane's ``a3m._native.UdpIo`` where ``a3m.NATIVE`` (a batch of reads in one
``recvmmsg``, a batch of sends in GSO runs and ``sendmmsg``), else :class:`UdpOffload`, its
Python twin (a system call a datagram, or a segmented ``sendmsg``). Offload is
detected at run time (the socket options exist) and turned off for a socket when the kernel or
the path refuses a segmented send (``EIO``: a device without checksum offload; ``EINVAL``:
a segment above the path MTU, ...): the batch then goes one datagram per call, as before.
"""

from __future__ import annotations

import errno
import os
import socket
import struct
from collections.abc import Callable
from functools import partial
from typing import Any

SOL_UDP = 17
UDP_SEGMENT = 103
UDP_GRO = 104
#: Most bytes one segmented send carries (a UDP payload is at most 65507 bytes).
GSO_MAX_BYTES = 65000
#: Most segments one send carries (the kernel's UDP_MAX_SEGMENTS is 64 on older kernels).
GSO_MAX_SEGMENTS = 64
#: Errors of a segmented send that mean "not here": offload goes off for that socket.
REFUSED = frozenset({errno.EIO, errno.EINVAL, errno.EMSGSIZE, errno.ENOPROTOOPT,
                     errno.EOPNOTSUPP})
_SEG = struct.Struct("=H")
_GRO_SIZE = struct.Struct("=i")
_CMSG_SPACE = socket.CMSG_SPACE(_GRO_SIZE.size) if hasattr(socket, "CMSG_SPACE") else 0


def gso_batches(out: list[tuple[bytes, Any]], max_bytes: int = GSO_MAX_BYTES,
                max_segments: int = GSO_MAX_SEGMENTS) -> list[tuple[Any, int, list[bytes]]]:
    """Group ``out`` (datagram, address) in order into segmented sends: each batch is
    ``(address, segment size, datagrams)``, consecutive datagrams to one address, every one
    of the segment size but the last, which may be shorter (then it ends the batch), at most
    ``max_segments`` and ``max_bytes`` in all. Order is kept: a batch never jumps a datagram
    to another address."""
    batches: list[tuple[Any, int, list[bytes]]] = []
    cur: list[bytes] | None = None
    cur_addr: Any = None
    seg = total = 0
    closed = False
    for data, addr in out:
        n = len(data)
        if (cur is not None and not closed and addr == cur_addr and 0 < n <= seg
                and len(cur) < max_segments and total + n <= max_bytes):
            cur.append(data)
            total += n
            closed = n < seg
            continue
        cur = [data]
        # (an empty datagram travels alone: a segmented send cannot carry one)
        cur_addr, seg, total, closed = addr, n, n, n == 0
        batches.append((addr, seg, cur))
    return batches


def split_gro(data: bytes | memoryview, seg: int) -> list[bytes]:
    """The datagrams of one coalesced read: ``seg`` bytes each, the last possibly shorter."""
    n = len(data)
    if seg <= 0 or seg >= n:
        return [bytes(data)]
    return [bytes(data[i:i + seg]) for i in range(0, n, seg)]


def gro_segment(ancdata: list[tuple[int, int, bytes]]) -> int:
    """The segment size a ``recvmsg`` reported in its ancillary data (0: not coalesced)."""
    for level, kind, value in ancdata:
        if level == SOL_UDP and kind == UDP_GRO and len(value) >= _GRO_SIZE.size:
            return int(_GRO_SIZE.unpack_from(value)[0])
    return 0


def gso_supported(sock: socket.socket) -> bool:
    """Whether the kernel knows ``UDP_SEGMENT`` for this socket (Linux 4.18 and later)."""
    try:
        sock.getsockopt(SOL_UDP, UDP_SEGMENT)
    except OSError:
        return False
    return hasattr(sock, "sendmsg")


def enable_gro(sock: socket.socket) -> bool:
    """Ask for coalesced reads (``UDP_GRO``, Linux 5.0 and later); whether it took."""
    if not _CMSG_SPACE or not hasattr(sock, "recvmsg_into"):
        return False
    try:
        sock.setsockopt(SOL_UDP, UDP_GRO, 1)
    except OSError:
        return False
    return True


def offload_for(sock: socket.socket) -> Any:
    """The drivers' batched I/O for ``sock``: the native ``UdpIo`` where ``a3m.NATIVE`` (it
    has ``recv(max)``: one call a batch), else a :class:`UdpOffload`. Offload as
    ``A3M_UDP_OFFLOAD`` says: ``off``, ``gso``, ``gro``, or ``on`` (both, where the kernel
    has them); unset: :data:`NATIVE_OFFLOAD` on the native path, ``off`` on the Python one.

    Off by default: on a 1500-byte veth a segmented send costs the kernel 0.8-1.3 us a
    datagram against 7.7-8.5 us for ``sendto``, but the A3M stream did not get faster with
    it (the sender CPU it seemed to cost was a spin in the node, since fixed; the rate still
    does not gain: docs/performance.md), and with GRO every read goes through ``recvmsg``
    and its ancillary data, 2-2.5x a ``recvfrom_into`` (2.3 -> 5.6 us) when nothing
    coalesces, as on loopback or in request/reply."""
    native = _native_module()
    want = os.environ.get("A3M_UDP_OFFLOAD", "").strip().lower()
    if not want:
        want = NATIVE_OFFLOAD if native is not None else "off"
    both = want in ("on", "1", "both", "yes", "true")
    gso, gro = both or want == "gso", both or want == "gro"
    if native is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
        try:
            return native.UdpIo(sock, gso=gso, gro=gro)
        except OSError:
            pass  # (a socket quinn-udp cannot set up: the Python twin reads it)
    return UdpOffload(sock, gso=gso, gro=gro)


def turn_io(proto: Any, io: Any) -> tuple[Any, Any, Callable[[float], Any]]:
    """How a turn reads and takes its output, chosen once per protocol and socket layer (the
    same in both drivers): (:func:`fused_reader`'s fused read or None, ``io.recv`` or None,
    ``output(now)``). The output is the native engine's ``output_batch`` (sealed into one
    buffer, no Python object per datagram) where both it and the socket layer are native,
    else the protocol's ``datagrams_to_send`` list; either is falsy when there is nothing."""
    native_recv = getattr(io, "recv", None)
    batch = getattr(proto, "output_batch", None)
    output: Callable[[float], Any] = (
        partial(batch, io) if batch is not None and native_recv is not None
        else proto.datagrams_to_send)
    return fused_reader(proto, io), native_recv, output


def fused_reader(proto: Any, io: Any) -> Any:
    """The native engine's ``receive_io`` where both it and the socket layer are native (a
    turn's reads go from the kernel into the engine: it returns how many were read and the
    time after the reads), else None."""
    if hasattr(io, "recv"):
        return getattr(proto, "receive_io", None)
    return None


def native_read(fused: Any, native_recv: Any, io: Any, burst: int
                ) -> tuple[list[tuple[bytes, Any]], int, float | None, int]:
    """A turn's read on the native data plane, the same in both drivers: through ``fused``
    (:func:`fused_reader`: into the engine) or ``native_recv`` (``io.recv``: one recvmmsg),
    up to ``burst`` datagrams. Returns (the datagrams for ``receive_datagrams``, how many the
    fused read took, the time after its reads or None, read errors): an OSError is counted
    (an ICMP error surfacing, a socket swapped by rebind), never raised."""
    if fused is not None:
        try:
            got, now = fused(io, burst)
            return [], got, now, 0
        except OSError:
            return [], 0, None, 1
    if native_recv is not None:
        try:
            return native_recv(burst), 0, None, 0
        except OSError:
            return [], 0, None, 1
    return [], 0, None, 0


def native_loop(proto: Any, io: Any) -> Any:
    """The native engine's GIL-free I/O loop (``run_io``) where both it and the socket
    layer are native and ``A3M_NATIVE_LOOP`` is not 0, else None (the driver selects)."""
    if os.environ.get("A3M_NATIVE_LOOP", "1") == "0" or not hasattr(io, "recv"):
        return None
    return getattr(proto, "run_io", None)


#: Offload on the native path when ``A3M_UDP_OFFLOAD`` is unset (docs/performance.md,
#: "Native data plane": measured there).
NATIVE_OFFLOAD = "gso"


def _native_module() -> Any:
    from a3m._dataplane import native

    return native


class UdpOffload:
    """One socket's sends and reads, segmented where the kernel allows.

    ``send(out)`` sends the protocol's datagrams (grouped by :func:`gso_batches` when GSO is
    on) and returns the errors; ``reader(buf)`` returns a read function that yields the
    datagrams of one read as ``[(bytes, address), ...]`` (several with GRO). Counters:
    ``gso_sends`` (segmented calls), ``gso_datagrams`` (datagrams they carried),
    ``gro_reads`` (reads that held more than one), ``gso_refused`` (1 once offload went off)."""

    def __init__(self, sock: socket.socket, gso: bool = True, gro: bool = True) -> None:
        self.sock = sock
        self.gso = gso and sock.family in (socket.AF_INET, socket.AF_INET6) \
            and gso_supported(sock)
        self.gro = gro and enable_gro(sock)
        self.gso_sends = 0
        self.gso_datagrams = 0
        self.gro_reads = 0
        self.gso_refused = 0
        self._reader: tuple[bytearray, Callable[[], list[tuple[bytes, Any]]]] | None = None

    def send(self, out: list[tuple[bytes, Any]]) -> int:
        """Send every datagram of ``out``, in order; the number that failed (a full kernel
        buffer, an ICMP error surfacing: the protocol's timers resend)."""
        sock = self.sock
        errors = 0
        if not self.gso or len(out) < 2:
            send = sock.sendto
            for data, addr in out:
                try:
                    send(data, addr)
                except OSError:
                    errors += 1
            return errors
        sendmsg = sock.sendmsg
        for addr, seg, parts in gso_batches(out):
            if len(parts) > 1 and self.gso:
                try:
                    sendmsg(parts, [(SOL_UDP, UDP_SEGMENT, _SEG.pack(seg))], 0, addr)
                    self.gso_sends += 1
                    self.gso_datagrams += len(parts)
                    continue
                except BlockingIOError:
                    errors += len(parts)  # the kernel buffer is full: the timers resend
                    continue
                except OSError as exc:
                    if exc.errno not in REFUSED:
                        errors += len(parts)
                        continue
                    self.gso = False  # refused here: one datagram per call from now on
                    self.gso_refused = 1
            for data in parts:
                try:
                    sock.sendto(data, addr)
                except OSError:
                    errors += 1
        return errors

    def reader(self, buf: bytearray) -> Callable[[], list[tuple[bytes, Any]]]:
        """A function reading once into ``buf`` (at least 64 KiB with GRO): the datagrams of
        that read; raises as ``recvfrom_into`` does (``BlockingIOError`` when none waits)."""
        if self._reader is not None and self._reader[0] is buf:
            return self._reader[1]
        fn = self._make_reader(buf)
        self._reader = (buf, fn)
        return fn

    def _make_reader(self, buf: bytearray) -> Callable[[], list[tuple[bytes, Any]]]:
        view = memoryview(buf)
        if not self.gro:
            recv = self.sock.recvfrom_into

            def read_one() -> list[tuple[bytes, Any]]:
                n, addr = recv(buf)
                return [(bytes(view[:n]), addr)]

            return read_one
        recvmsg = self.sock.recvmsg_into
        bufs = [buf]

        def read_coalesced() -> list[tuple[bytes, Any]]:
            n, anc, _flags, addr = recvmsg(bufs, _CMSG_SPACE)
            seg = gro_segment(anc) if anc else 0
            if 0 < seg < n:
                self.gro_reads += 1
                return [(d, addr) for d in split_gro(view[:n], seg)]
            return [(bytes(view[:n]), addr)]

        return read_coalesced
