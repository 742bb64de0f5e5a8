"""Typed stubs of ``a3m._native``, the native data plane (the Rust crate in ``native/``).

Each function and class has a Python twin that stays the specification (``docs/design.md``,
"The native data plane"); ``a3m.NATIVE`` tells whether this module runs.
"""

from collections.abc import Callable, Hashable
from typing import Any

__version__: str
#: The AEAD implementation (crate and algorithm).
AEAD: str
#: The batched UDP layer.
UDP: str

class NativePanic(RuntimeError):
    """A panic in native code: caught at the boundary, counted (:func:`panics`), raised."""

def panics() -> int:
    """Panics caught at the boundary since the module loaded."""

def alloc_counting(on: bool) -> None:
    """Count the interpreter's allocations from now on (``on``), or stop counting them: a
    hook over the allocators of the ``mem`` and ``obj`` domains that counts each new block
    (malloc, calloc, realloc of nothing) and hands every call on. No Python twin: without
    this module the benchmarks' allocation count is None (:mod:`a3m.benchmarks.work`)."""

def allocations() -> int:
    """The allocations counted while counting was on, since the module loaded (what C's
    ``malloc`` gives a library, the raw domain and the objects a free list serves are not
    in it)."""

def alloc_counting_on() -> bool:
    """Whether the allocations are being counted."""

def decode_header(data: bytes) -> tuple[bytes, bytes, int]:
    """Twin of :func:`a3m.exon.wire.decode_header`; raises its ``WireError``."""

def decode_frames(data: bytes, offset: int, max_message_size: int
                  ) -> tuple[list[tuple[Any, ...]], Any]:
    """Twin of :func:`a3m.exon.wire.decode_frames`: (frames, ``WireError`` or None)."""

def batch_runs(head: bytes, seq: int, payloads: list[bytes], limit: int) -> list[bytes]:
    """Twin of :func:`a3m.core.message.batch_runs` (payloads: bytes only, ``limit`` >= 0)."""

def split_batch(body: bytes) -> list[bytes]:
    """Twin of :func:`a3m.core.message.split_batch`; raises its ``ProtocolViolation``."""

def decode_sequenced(data: bytes) -> tuple[int, str, str, int, int, int, bytes]:
    """Twin of :func:`a3m.core.message.decode_sequenced`; raises its ``ProtocolViolation``."""

class Cipher:
    """One direction of a secure session, ChaCha20-Poly1305 (ring); twin of
    :class:`a3m.exon.secure.aead.PyCipher`."""

    def __init__(self, key: bytes) -> None: ...
    def seal(self, kind: int, index: int, counter: int, plain: bytes) -> bytes:
        """The sealed datagram: header, ciphertext, tag."""
    def seal_many(self, index: int, counter: int, plains: list[bytes]) -> list[bytes]:
        """Each of ``plains`` sealed as a DATA datagram, counters from ``counter`` on."""
    def open(self, datagram: bytes) -> bytes | None:
        """The plaintext, or None when the tag does not verify."""

class UdpIo:
    """Batched reads and sends on a Python UDP socket (the caller's); twin of
    :class:`a3m.runtime.offload.UdpOffload`."""

    def __init__(self, sock: Any, gso: bool = True, gro: bool = True) -> None: ...
    @property
    def gso(self) -> bool: ...
    @property
    def gro(self) -> bool: ...
    @property
    def gso_refused(self) -> int: ...
    @property
    def gso_sends(self) -> int: ...
    @property
    def gso_datagrams(self) -> int: ...
    @property
    def gro_reads(self) -> int: ...
    def counters(self) -> dict[str, int]:
        """System calls and what they carried: recv_calls, recv_datagrams, gro_reads,
        send_calls, send_datagrams, gso_sends, gso_datagrams, send_errors, recv_errors."""
    def recv(self, max: int = 512) -> list[tuple[bytes, Any]]:
        """Up to ``max`` datagrams waiting, with their sources (empty: none)."""
    def send(self, out: list[tuple[bytes, Any]] | OutBatch) -> int:
        """Send ``out`` (a list, or an ``OutBatch`` made by ``ExonCore.output_batch``) in
        order; the number that failed (a closed socket: all of them)."""
    @property
    def send_order(self) -> SendOrder:
        """The lock held from taking output to sending it (the native loop's too)."""

class SendOrder:
    """A lock used as ``threading.Lock`` is (acquire/release, a context manager), waited for
    without the interpreter's lock, and shared with the native loop."""

    def acquire(self, blocking: bool = True, timeout: float = -1.0) -> bool: ...
    def release(self) -> None: ...
    def __enter__(self) -> bool: ...
    def __exit__(self, *exc: object) -> None: ...

class SessionPath:
    """A session's data-path state (keys, counters, replay window, proven address); twin of
    :class:`a3m.exon.secure.session.SessionPath`."""

    def __init__(self, peer: str, local_index: int, remote_index: int, send_key: bytes,
                 recv_key: bytes, initiator: bool, addr: Any, now: float) -> None: ...
    counter: int
    last_recv: float
    last_sent: float
    unanswered: int
    confirmed: bool
    reject_at: float
    rekey_at: float
    silence_s: float
    rtt: float
    addr: Any
    candidate: Any
    @property
    def peer(self) -> str: ...
    @property
    def local_index(self) -> int: ...
    @property
    def remote_index(self) -> int: ...
    @property
    def initiator(self) -> bool: ...
    @property
    def top(self) -> int: ...
    @property
    def ring(self) -> bytes: ...
    def fresh(self, counter: int) -> bool: ...
    def accept(self, counter: int) -> None: ...

class SessionTable:
    """The live sessions by local index and each peer's current one, shared with the native
    engine's fast paths; twin of :class:`a3m.exon.secure.session.SessionTable`."""

    def __init__(self) -> None: ...
    def install(self, index: int, path: SessionPath) -> None: ...
    def drop(self, index: int, path: SessionPath) -> None: ...
    def __len__(self) -> int: ...
class HandshakeMeter:
    """The budgets of handshake datagrams from unproven addresses, shared by the secure layer
    and the native reads (which shed a flood's token-less HELLOs); twin of
    :class:`a3m.exon.secure.meter.HandshakeMeter`."""

    def __init__(self, handshake_rate: float = 1000.0, retry_rate: float = 2000.0) -> None: ...
    def source_ok(self, addr: Hashable, now: float, cost: float = 1.0) -> bool: ...
    def hello(self, addr: Hashable, now: float) -> int: ...
    def source_count(self) -> int: ...
    def state(self) -> tuple[float, float, float, float, float, float, int]: ...
    def budget_of(self, addr: Hashable) -> tuple[float, float] | None: ...

class CookieKeys:
    """A cookie jar's secrets (newest first, each with its epoch), handed over at each
    rotation, for the native reads' check of INITIATEs and their RETRYs; twin of
    :meth:`a3m.exon.secure.cookies.CookieJar.open`, and of the responder's RETRY (made with
    ``CookieJar.token``'s token)."""

    def __init__(self) -> None: ...
    def set(self, secrets: list[tuple[int, bytes]], since: float, rotation_s: float) -> None:
        """The jar's secrets, newest first; the newest became current at ``since`` and is
        replaced ``rotation_s`` later (the jar's ``SECRET_ROTATION_S``)."""
    def retry(self, d: bytes, addr: tuple[Any, ...], now: float) -> bytes | None:
        """The responder's RETRY to token-less HELLO ``d`` from ``addr`` (its token is
        ``CookieJar.token``'s), or None: not such a HELLO, or ``now`` outside the newest
        secret's span."""
    def __len__(self) -> int: ...
    def opens(self, cookie: bytes, bound: bytes, now: float) -> bool:
        """``CookieJar.open(cookie, bound, now) is not None``."""
    def check_initiate(self, d: bytes, addr: tuple[Any, ...], now: float) -> str | None:
        """What the native reads decide of INITIATE ``d`` from ``addr``: "valid", "invalid"
        (refused: ``cookie_invalid``), "early" (left to the responder), None (truncated)."""

class ReplayWindow:
    """The replay window of a session's receiving direction; twin of
    :class:`a3m.exon.secure.replay.ReplayWindow`."""

    def __init__(self) -> None: ...
    @property
    def top(self) -> int:
        """The highest counter accepted (-1: none yet)."""
    @property
    def ring(self) -> bytes:
        """A copy of the ring of bits."""
    def fresh(self, counter: int) -> bool:
        """Whether ``counter`` was never accepted and is not too old."""
    def accept(self, counter: int) -> None:
        """Record ``counter``."""

class OutBatch:
    """A turn's output, sealed, in order: one buffer and each datagram's destination."""

    def __len__(self) -> int: ...
    def __bool__(self) -> bool: ...
    def datagrams(self, io: UdpIo) -> list[tuple[bytes, Any]]:
        """The datagrams as ``(bytes, address)`` pairs (tests, diagnostics)."""

class ExonCore:
    """The Exon engine in Rust, driven as :class:`a3m.exon.protocol.ExonProtocol` is (its
    twin and specification); made by :func:`a3m.exon.engine.new_protocol`."""

    def __init__(self, node_id: str, config: Any, clock_store: Any, resolver: Any,
                 path_mtu: Any, pacer: Any, events: Any, stats: Any) -> None: ...
    def attach_secure(self, sec: Any) -> None:
        """Attach the secure layer (made with this core's callbacks)."""
    id: str
    config: Any
    stats: Any
    secure: Any
    clock: int
    boot_clock: int
    closing: bool
    buffered_bytes: int
    def associate(self, node_id: str, addr: Any, public_key: Any = None) -> None: ...
    def announce(self, now: float) -> None: ...
    def address_of(self, node_id: str) -> Any: ...
    def send(self, dst: str, payload: bytes, now: float, receipt: bool = False) -> int | None: ...
    def send_many(self, dst: str, payloads: list[bytes], now: float) -> int: ...
    def send_room(self, dst: str) -> int: ...
    def can_send(self, dst: str, nbytes: int = 0) -> bool: ...
    def in_flight(self) -> int: ...
    def consumed(self, nbytes: int) -> None: ...
    def receive_datagram(self, data: bytes, addr: Any, now: float) -> None: ...
    def receive_datagrams(self, batch: list[tuple[bytes, Any]], now: float) -> None: ...
    def receive_io(self, io: UdpIo, max: int) -> tuple[int, float]:
        """A turn's reads straight from ``io`` into the engine: how many, and the time read
        after them."""
    def run_io(self, io: UdpIo, wake_fd: int, until: float, spin_s: float = 0.0
               ) -> tuple[int, int, float]:
        """The I/O loop without the interpreter's lock: waits on ``io``'s socket,
        ``wake_fd`` (-1: none) and Exon's timers until ``until``, doing the live sessions'
        reads, opens, frames, timers, seals and sends natively. Returns (why: 0 ``until``
        came, 1 woken, 2 Python has work, 3 input for a leading application thread;
        datagrams read; the time)."""
    def lead_io(self, io: UdpIo, wake_fd: int, until: float, window_s: float = 0.0
                ) -> tuple[int, int, float, bool]:
        """A leading application thread's wait in one call: ``run_io``'s loop, reading
        whatever the leader flag says and publishing no deadline, until ``until`` (Exon's
        timers are handled inside), polling first as the engine's poll choice says
        (``set_busy_poll``), or for ``window_s`` when not 0. Returns (why, as ``run_io``'s;
        datagrams read; the time; whether a poll saw the input come)."""
    def set_busy_poll(self, budget: float) -> None:
        """The busy-poll budget of ``lead_io``'s waits (0: never poll)."""
    def set_leader(self, leading: bool) -> None:
        """An application thread leads (it reads): ``run_io`` leaves the socket to it."""
    def loop_until(self) -> float:
        """When ``run_io`` sleeps until (0.0: awake or not running)."""
    def loop_left(self) -> int:
        """Datagrams the native loops read and left to the Python turn, ever."""
    def secure_python(self) -> int:
        """Datagrams handed to the Python secure layer (``open``, ``open_hello``), ever."""
    def hellos_shed(self) -> int:
        """Token-less HELLOs the native reads shed from the handshake budgets, ever (counted
        in ``unauth_shed`` too; none reached Python)."""
    def initiates_refused(self) -> int:
        """INITIATEs the native reads refused (truncated, or a cookie that does not open),
        ever (counted in ``truncated`` or ``cookie_invalid`` too; none reached Python)."""
    def take_io_errors(self) -> int:
        """Datagrams ``run_io`` failed to send since the last call."""
    def datagrams_to_send(self, now: float) -> list[tuple[bytes, Any]]: ...
    def output_batch(self, io: UdpIo, now: float) -> OutBatch | None:
        """``datagrams_to_send``, sealed into one batch for ``io.send`` (None: nothing)."""
    def has_output(self) -> bool: ...
    def next_timer(self) -> float | None: ...
    def handle_timer(self, now: float) -> None: ...
    def next_event(self) -> Any: ...
    def drain_events(self) -> list[Any]: ...
    def ack_deadline(self) -> float | None: ...
    def close(self, now: float) -> None: ...
    def is_closed(self) -> bool: ...
    def is_finished(self) -> bool: ...
    def is_idle(self) -> bool: ...
    def abandon(self, peer: str, now: float) -> int: ...
    def unreachable_peers(self) -> list[str]: ...
    def record_counts(self) -> tuple[int, int]: ...
    def srtt(self, peer: str) -> float | None: ...
    def peer_pto(self, peer: str) -> float: ...
    def max_peer_pto(self) -> float: ...
    def max_unfragmented(self, peer: str) -> int: ...
    def path_stats(self, peer: str) -> dict[str, float] | None: ...
    def send_peers(self) -> list[str]: ...

class PathRecoveryCore:
    """Twin of :class:`a3m.exon.recovery.PathRecovery` (the fields and methods of the Python
    class, for the differential tests)."""

    def __init__(self, initial_pto: float, peer_ack_delay: float, backoff_cap: float,
                 mds: int, pacing: bool = True) -> None: ...
    def __getattr__(self, name: str) -> Any: ...

class FirstProbePacerCore:
    """Twin of :class:`a3m.exon.pacer.FirstProbePacer`."""

    def __init__(self, rate: float = 200.0, burst_s: float = 0.1) -> None: ...
    def slot(self, now: float) -> float: ...
    def admit(self, reserved: float, now: float, grace: float) -> float: ...

class SendBuffer:
    """Twin of :class:`a3m.runtime.send_buffer.SendBuffer` (a socket's send buffer): the
    same methods and attributes; ``items`` and ``marks`` are copies."""

    room: int
    stalled: bool
    @property
    def items(self) -> list[Any]: ...
    @property
    def marks(self) -> list[Any] | None: ...
    def __init__(self) -> None: ...
    def __len__(self) -> int: ...
    def offer(self, item: Any, mark: Any = None) -> bool: ...
    def offer_many(self, items: list[Any], marks: list[Any] | None = None,
                   max_size: int = -1) -> bool: ...
    def drain(self, hand: Callable[[list[Any], list[Any] | None], int]) -> bool: ...
    def give_up_marked(self) -> list[Any]: ...
    def clear_marks(self) -> list[Any]: ...
    def open(self, room: int) -> bool: ...
    def shut(self) -> bool: ...
    def clear(self) -> list[Any]: ...

class FastSend:
    """A socket's ``send`` in one native call (its bound ``send`` method is the socket's):
    a ``bytes`` message of at most ``fast_size`` bytes, without cookie, with a timeout
    absent or not negative, goes into ``buf`` while it has room; anything else to
    ``slow(owner(), data, timeout, cookie)`` (``owner``: a weak reference). It takes no other
    keyword (for sockets whose pattern takes none): the vectorcall convention, no dict."""

    def __init__(self, buf: SendBuffer, fast_size: int, slow: Callable[..., Any],
                 owner: Callable[[], Any]) -> None: ...
    def send(self, data: Any, timeout: Any = None, cookie: Any = None) -> Any: ...

class FastRecv:
    """A socket's ``recv`` in one native call (its bound ``recv`` method is the socket's):
    the payload of the first ``(payload, source)`` of ``inbox`` (a deque) while it holds
    one, else ``slow(owner(), timeout)``. Made with ``Socket.recv_many`` as ``slow``, its
    ``recv_many`` is the socket's: up to ``max_items`` payloads from the inbox, else
    ``slow(owner(), max_items, timeout)``."""

    def __init__(self, inbox: Any, slow: Callable[..., Any],
                 owner: Callable[[], Any]) -> None: ...
    def recv(self, timeout: Any = None) -> Any: ...
    def recv_many(self, max_items: Any, timeout: Any = None) -> Any: ...

class Exchange:
    """A node's exchange: its lent sockets' ``table``, shared with its engine (a leader's
    reads hand them their requests and replies), and their ``XSocket``s. ``wake()`` gives
    ``f(held)`` (or None), ``unsent()`` gives ``f(peer, message, held)`` (or None): weak
    methods, the driver's wake-up and the bridge's outbox; ``held``: the caller holds the
    node's lock."""

    table: ExchangeTable
    def __init__(self, engine: ExonCore, io: UdpIo, wake: Callable[[], Any],
                 unsent: Callable[[], Any]) -> None: ...
    def set_io(self, io: UdpIo) -> None: ...
    def detach(self) -> None: ...
    def socket(self, tag: str, slow_send: Callable[..., Any], slow_recv: Callable[..., Any],
               owner: Callable[[], Any]) -> XSocket: ...

class ExchangeTable:
    """A node's lent REQ and REP sockets: lent and taken back (``a3m.runtime.exchange``);
    the seeded simulator (``a3m.testing``) drives one alone with ``offer``, ``take`` and
    ``send``."""

    def lend(self, tag: str, kind: int,
             rows: list[tuple[str, str, int, bytes, list[int], list[float]]],
             inbox: list[tuple[int, int, bytes]], owed: tuple[int, int] | None,
             next_id: int, ka_s: float, max_payload: int) -> None: ...
    def reclaim(self, tag: str) -> tuple[list[tuple[list[int], list[float]]],
                                         list[tuple[int, int, bytes]], tuple[int, int] | None,
                                         int, int, int, int] | None: ...
    def lent(self, tag: str) -> bool: ...
    def tags(self) -> list[str]: ...
    def offer(self, src: str, msg: bytes, now: float) -> bool: ...
    def take(self, tag: str, now: float, rtt: Callable[[str], float | None],
             can_send: Callable[[str], bool]
             ) -> tuple[bytes, tuple[str, bytes] | None] | bool | None: ...
    def send(self, tag: str, payload: bytes, now: float,
             can_send: Callable[[str], bool]) -> tuple[str, bytes] | None: ...

def decode_flow(data: bytes) -> tuple[str, str, int, int, int, int] | None: ...

class XSocket:
    """A REQ or REP socket's ``send`` and ``recv`` (bound as its methods): natively while the
    socket is lent, else ``slow_send(owner(), data, timeout, cookie)`` and
    ``slow_recv(owner(), timeout)``; ``take()``: the payload, None (wait) or False (the core
    must act)."""

    def send(self, data: Any, timeout: Any = None, cookie: Any = None) -> None: ...
    def recv(self, timeout: Any = None) -> bytes: ...
    def take(self) -> bytes | bool | None: ...

class PollChoiceCore:
    """Twin of :class:`a3m.runtime.poll_choice.PollChoice` (the choice ``lead_io`` makes)."""

    budget: float
    waits: int
    poll_s: float
    block_s: float
    preempted: float
    def __init__(self, budget: float) -> None: ...
    def poll_next(self) -> bool: ...
    def record(self, polled: bool, waited_s: float, preempted: bool = False) -> None: ...
