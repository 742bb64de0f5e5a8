"""What a responder hands an initiator instead of keeping state: cookies and address tokens,
sealed under a secret only it knows (``docs/exon-wire.md``, "The stateless responder")."""

from __future__ import annotations

import hmac
import struct
from collections.abc import Callable
from typing import Any

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305

from a3m._dataplane import native

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
    checks address tokens (``time | HMAC-SHA-256(secret, address | e | index | time)[:16]``).

    A forged cookie or token costs one attempt, not one per secret kept: a cookie's first
    nonce byte names the secret that sealed it (its epoch, modulo 256; the other 11 bytes
    are random), and a token's time says which secret was current when it was made.

    The secrets change only when a cookie or a token is made (:meth:`seal`, :meth:`token`):
    :meth:`open` reads them as they are, so a check changes nothing. A rotation's new secret
    has sealed nothing yet, and the secret it retires sealed only cookies past their life,
    so opening before a due rotation gives what opening after it would. ``twin``, when
    given (``a3m._native.CookieKeys``), is told every rotation (the secrets, when the newest
    became current and how long it stays so): the native reads refuse a forged INITIATE from it, and make the
    token of a HELLO's RETRY while the newest secret is not due, before any Python runs.
    """

    def __init__(self, entropy: Callable[[int], bytes], twin: Any = None) -> None:
        self._entropy = entropy
        self.twin = twin
        self._secrets: list[bytes] = []  # newest first, with the three lists below
        self._aeads: list[ChaCha20Poly1305] = []
        self._since: list[float] = []  # when each became current
        self._epochs: list[int] = []  # its epoch modulo 256 (a cookie's first nonce byte)
        self._epoch = 0
        self._rotated_at = -_INF

    def _current(self, now: float) -> list[bytes]:
        if now - self._rotated_at >= SECRET_ROTATION_S:
            secret = self._entropy(32)
            self._epoch = (self._epoch + 1) & 0xFF
            self._secrets = [secret] + self._secrets[:2]
            self._aeads = [ChaCha20Poly1305(secret)] + self._aeads[:2]
            self._since = [now] + self._since[:2]
            self._epochs = [self._epoch] + self._epochs[:2]
            self._rotated_at = now
            if self.twin is not None:
                self.twin.set(list(zip(self._epochs, self._secrets, strict=True)), now,
                              SECRET_ROTATION_S)
        return self._secrets

    @staticmethod
    def _mac(secret: bytes, bound: bytes, ts: bytes) -> bytes:
        return ts + hmac.digest(secret, bound + ts, "sha256")[:16]

    def token(self, bound: bytes, now: float) -> bytes:
        """An address token for ``bound`` (address, e, index)."""
        return self._mac(self._current(now)[0], bound, _TS.pack(now))

    def token_ok(self, token: bytes, bound: bytes, now: float) -> bool:
        (ts,) = _TS.unpack_from(token)
        if not 0 <= now - ts <= COOKIE_LIFETIME_S:
            return False
        secrets = self._current(now)
        for i, since in enumerate(self._since):
            if since <= ts:  # the secret current when the token was made
                return hmac.compare_digest(token, self._mac(secrets[i], bound, token[:8]))
        return False

    def seal(self, e_private: bytes, index: int, bound: bytes, now: float) -> bytes:
        """A cookie carrying the responder's ephemeral key and session index."""
        self._current(now)
        nonce = bytes((self._epochs[0],)) + self._entropy(11)
        return nonce + self._aeads[0].encrypt(nonce, _COOKIE_PT.pack(e_private, index, now),
                                              bound)

    def open(self, cookie: bytes, bound: bytes, now: float) -> tuple[bytes, int, float] | None:
        """``(e_private, index, time made)``, or None: forged, bound to another address or
        handshake, or too old. Changes nothing (the secrets as they are: see the class)."""
        if len(cookie) < 12 + _COOKIE_PT.size + 16:
            return None
        epoch = cookie[0]
        for i, e in enumerate(self._epochs):
            if e == epoch:
                try:
                    opened = self._aeads[i].decrypt(cookie[:12], cookie[12:], bound)
                except InvalidTag:
                    return None
                e_priv, index, made = _COOKIE_PT.unpack(opened)
                return (e_priv, index, made) if 0 <= now - made <= COOKIE_LIFETIME_S else None
        return None


def new_cookie_keys() -> Any:
    """The native twin of a jar's secrets (``a3m._native.CookieKeys``) where ``a3m.NATIVE``,
    else None."""
    return None if native is None else native.CookieKeys()
