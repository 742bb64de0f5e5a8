"""Noise_XX_25519_ChaChaPoly_SHA256, composed from ``cryptography``'s primitives.

Only the handshake's bookkeeping is written here (the Noise specification, revision 34,
sections 5.1-5.3): the chaining key, the handshake hash and the cipher state. X25519,
ChaCha20-Poly1305, SHA-256 and HKDF are the library's.
"""

from __future__ import annotations

import hashlib

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

PROTOCOL_NAME = b"Noise_XX_25519_ChaChaPoly_SHA256"  # exactly HASHLEN bytes: h starts as it
TAG = 16


class HandshakeError(Exception):
    """A handshake message that does not authenticate or decode."""


def hkdf2(chaining_key: bytes, ikm: bytes) -> tuple[bytes, bytes]:
    """Noise's HKDF with two outputs: RFC 5869 with salt = chaining key and empty info."""
    out = HKDF(algorithm=hashes.SHA256(), length=64, salt=chaining_key, info=b"").derive(ikm)
    return out[:32], out[32:]


def nonce(n: int) -> bytes:
    """ChaChaPoly's nonce in Noise: 32 zero bits, then the counter little-endian."""
    return b"\0\0\0\0" + n.to_bytes(8, "little")


class SymmetricState:
    """Noise's SymmetricState with its CipherState folded in."""

    __slots__ = ("ck", "h", "k", "n")

    def __init__(self, prologue: bytes | None) -> None:
        self.h = PROTOCOL_NAME
        self.ck = PROTOCOL_NAME
        self.k: ChaCha20Poly1305 | None = None
        self.n = 0
        if prologue is not None:  # None: a blank for copy()
            self.mix_hash(prologue)

    def copy(self) -> SymmetricState:
        other = SymmetricState(None)
        other.ck, other.h, other.k, other.n = self.ck, self.h, self.k, self.n
        return other

    def mix_hash(self, data: bytes) -> None:
        self.h = hashlib.sha256(self.h + data).digest()

    def mix_key(self, ikm: bytes) -> None:
        self.ck, key = hkdf2(self.ck, ikm)
        self.k = ChaCha20Poly1305(key)
        self.n = 0

    def encrypt_and_hash(self, plaintext: bytes) -> bytes:
        if self.k is None:
            out = plaintext
        else:
            out = self.k.encrypt(nonce(self.n), plaintext, self.h)
            self.n += 1
        self.mix_hash(out)
        return out

    def decrypt_and_hash(self, ciphertext: bytes) -> bytes:
        if self.k is None:
            out = ciphertext
        else:
            try:
                out = self.k.decrypt(nonce(self.n), ciphertext, self.h)
            except InvalidTag as exc:
                raise HandshakeError("handshake message does not authenticate") from exc
            self.n += 1
        self.mix_hash(ciphertext)
        return out

    def split(self) -> tuple[bytes, bytes]:
        """The two transport keys: initiator to responder, responder to initiator."""
        return hkdf2(self.ck, b"")
