"""A node's long-term identity: an X25519 key pair (Noise's static key)."""

from __future__ import annotations

import binascii
from collections.abc import Callable

from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey

from a3m.errors import UsageError

KEY_BYTES = 32


class NodeKey:
    """An X25519 key pair. ``public`` is the 32 raw bytes peers pin."""

    __slots__ = ("_sk", "private", "public")

    def __init__(self, private: bytes) -> None:
        if len(private) != KEY_BYTES:
            raise UsageError(f"a node key is {KEY_BYTES} bytes")
        self.private = bytes(private)
        self._sk = X25519PrivateKey.from_private_bytes(self.private)
        self.public = self._sk.public_key().public_bytes_raw()

    @classmethod
    def generate(cls, entropy: Callable[[int], bytes]) -> NodeKey:
        """A fresh key pair from ``entropy`` (``os.urandom`` in a real node)."""
        return cls(entropy(KEY_BYTES))

    def dh(self, public: bytes) -> bytes:
        """X25519 with ``public``; raises ValueError for a low-order (all-zero result) point."""
        return self._sk.exchange(X25519PublicKey.from_public_bytes(bytes(public)))

    def __repr__(self) -> str:
        return f"NodeKey(public={format_public_key(self.public)})"


def format_public_key(public: bytes) -> str:
    """The text form of a public key: 64 lower-case hex digits."""
    return public.hex()


def parse_public_key(key: str | bytes) -> bytes:
    """A public key from its text form (64 hex digits) or its 32 raw bytes."""
    if isinstance(key, str):
        try:
            raw = binascii.unhexlify(key.strip())
        except (binascii.Error, ValueError) as exc:
            raise UsageError(f"a public key is 64 hex digits: {key!r}") from exc
    else:
        raw = bytes(key)
    if len(raw) != KEY_BYTES:
        raise UsageError(f"a public key is {KEY_BYTES} bytes ({2 * KEY_BYTES} hex digits)")
    return raw
