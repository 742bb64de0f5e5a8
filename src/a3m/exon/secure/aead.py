"""A secure session's sealed datagrams (``docs/exon-wire.md``, "Secure associations").

:class:`PyCipher` is the specification: one direction of a session, ChaCha20-Poly1305 from
``cryptography``; the header (version, type, the receiver's session index, the 64-bit packet
counter) is the associated data, the nonce 32 zero bits and the counter, big-endian. Its native
twin, ``a3m._native.Cipher`` (ring), makes the same bytes with one object per datagram (the
datagram) instead of four; :func:`new_cipher` picks the one that runs (``a3m.NATIVE``).
"""

from __future__ import annotations

import struct
from typing import Final, Protocol

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305

from a3m._dataplane import native
from a3m.exon.secure import packets as p

_NONCE: Final = struct.Struct(">4xQ").pack
_PACK: Final = p.SEALED_HDR.pack
_UNPACK: Final = p.SEALED_HDR.unpack_from
_HDR: Final = p.SEALED_HDR.size
_VERSION: Final = p.VERSION
_DATA: Final = p.DATA


class Cipher(Protocol):
    """What a session needs of one direction's AEAD."""

    def seal(self, kind: int, index: int, counter: int, plain: bytes) -> bytes: ...

    def seal_many(self, index: int, counter: int, plains: list[bytes]) -> list[bytes]: ...

    def open(self, datagram: bytes) -> bytes | None: ...


class PyCipher:
    """One direction of a session (a 32-byte key): the Python twin of ``a3m._native.Cipher``."""

    __slots__ = ("_aead",)

    def __init__(self, key: bytes) -> None:
        self._aead = ChaCha20Poly1305(key)

    def seal(self, kind: int, index: int, counter: int, plain: bytes) -> bytes:
        """The sealed datagram: header, ciphertext, tag."""
        hdr = _PACK(_VERSION, kind, index, counter)
        return hdr + self._aead.encrypt(_NONCE(counter), plain, hdr)

    def seal_many(self, index: int, counter: int, plains: list[bytes]) -> list[bytes]:
        """Each of ``plains`` sealed as a DATA datagram, counters from ``counter`` on."""
        encrypt = self._aead.encrypt
        out = []
        for plain in plains:
            hdr = _PACK(_VERSION, _DATA, index, counter)
            out.append(hdr + encrypt(_NONCE(counter), plain, hdr))
            counter += 1
        return out

    def open(self, datagram: bytes) -> bytes | None:
        """The plaintext of a sealed datagram (at least header and tag long), or None when
        its tag does not verify."""
        if len(datagram) < _HDR + 16:
            return None  # (no header and tag: nothing to open)
        counter: int = _UNPACK(datagram)[3]
        try:
            return self._aead.decrypt(_NONCE(counter), datagram[_HDR:], datagram[:_HDR])
        except InvalidTag:
            return None


def new_cipher(key: bytes) -> Cipher:
    """The cipher that runs: native where ``a3m.NATIVE``, else :class:`PyCipher`."""
    if native is not None:
        c: Cipher = native.Cipher(key)
        return c
    return PyCipher(key)
