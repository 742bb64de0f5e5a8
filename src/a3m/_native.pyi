"""Typed stubs of ``a3m._native``, the native data plane (the Rust crate in ``native/``).

Each function and class has a Python twin that stays the specification (``docs/design.md``,
"The native data plane"); ``a3m.NATIVE`` tells whether this module runs.
"""

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

def decode_header(data: bytes) -> tuple[bytes, bytes, int]:
    """Twin of :func:`a3m.exon.wire.decode_header`; raises its ``WireError``."""

def decode_frames(data: bytes, offset: int, max_message_size: int
                  ) -> tuple[list[tuple[Any, ...]], Any]:
    """Twin of :func:`a3m.exon.wire.decode_frames`: (frames, ``WireError`` or None)."""

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
    def send(self, out: list[tuple[bytes, Any]]) -> int:
        """Send ``out`` in order; the number that failed."""
