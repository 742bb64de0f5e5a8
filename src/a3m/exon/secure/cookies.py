"""What a responder hands an initiator instead of keeping state: cookies and address tokens,
sealed under a secret only it knows (``docs/exon-wire.md``, "The stateless responder")."""

from __future__ import annotations

import hashlib
import hmac
import struct
from collections.abc import Callable

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305

#: A cookie or an address token is honoured this long after it was made (the longest round
#: trip a handshake can complete over).
COOKIE_LIFETIME_S = 120.0
#: The secret is replaced this often; the two before it stay, so each lives at least
#: COOKIE_LIFETIME_S.
SECRET_ROTATION_S = COOKIE_LIFETIME_S / 2

_TS = struct.Struct(">d")
_COOKIE_PT = struct.Struct(">32sId")  # responder e (private), responder index, time made
_INF = float("inf")


class CookieJar:
    """Seals and opens cookies (``nonce | ChaCha20-Poly1305(secret, e_priv | index | time)``,
    bound to the initiator's address, e and index by the associated data) and makes and
    checks address tokens (``time | HMAC-SHA-256(secret, address | e | index | time)[:16]``)."""

    def __init__(self, entropy: Callable[[int], bytes]) -> None:
        self._entropy = entropy
        self._secrets: list[bytes] = []
        self._rotated_at = -_INF

    def _current(self, now: float) -> list[bytes]:
        if now - self._rotated_at >= SECRET_ROTATION_S:
            self._secrets = [self._entropy(32)] + self._secrets[:2]
            self._rotated_at = now
        return self._secrets

    @staticmethod
    def _mac(secret: bytes, bound: bytes, ts: bytes) -> bytes:
        return ts + hmac.new(secret, bound + ts, hashlib.sha256).digest()[:16]

    def token(self, bound: bytes, now: float) -> bytes:
        """An address token for ``bound`` (address, e, index)."""
        return self._mac(self._current(now)[0], bound, _TS.pack(now))

    def token_ok(self, token: bytes, bound: bytes, now: float) -> bool:
        (ts,) = _TS.unpack_from(token)
        return 0 <= now - ts <= COOKIE_LIFETIME_S and any(
            hmac.compare_digest(token, self._mac(k, bound, token[:8]))
            for k in self._current(now))

    def seal(self, e_private: bytes, index: int, bound: bytes, now: float) -> bytes:
        """A cookie carrying the responder's ephemeral key and session index."""
        nonce = self._entropy(12)
        return nonce + ChaCha20Poly1305(self._current(now)[0]).encrypt(
            nonce, _COOKIE_PT.pack(e_private, index, now), bound)

    def open(self, cookie: bytes, bound: bytes, now: float) -> tuple[bytes, int, float] | None:
        """``(e_private, index, time made)``, or None: forged, bound to another address or
        handshake, or too old."""
        for secret in self._current(now):
            try:
                opened = ChaCha20Poly1305(secret).decrypt(cookie[:12], cookie[12:], bound)
            except InvalidTag:
                continue
            e_priv, index, made = _COOKIE_PT.unpack(opened)
            return (e_priv, index, made) if 0 <= now - made <= COOKIE_LIFETIME_S else None
        return None
