"""The three handshake messages of Noise XX with A3M's payloads (byte layout in
``docs/exon-wire.md``, "Secure associations").

::

    HELLO     ->  e                    payload: initiator index (in clear)
    WELCOME   <-  e, ee, s, es         payload: responder index, incarnation, cookie, id
    INITIATE  ->  s, se                payload: initiator incarnation, id

The responder keeps no state between WELCOME and INITIATE: its ephemeral key travels sealed in
the cookie, and :func:`respond` recomputes the same WELCOME from it (it is deterministic).
"""

from __future__ import annotations

import struct
from typing import NamedTuple

from a3m.exon import wire
from a3m.exon.secure.keys import KEY_BYTES, NodeKey
from a3m.exon.secure.noise import TAG, HandshakeError, SymmetricState

#: Bound into every handshake: the wire version and the responder's node id.
PROLOGUE_PREFIX = b"A3M exon %d\0" % wire.VERSION
INDEX = struct.Struct(">I")
INCARNATION = struct.Struct(">Q")
COOKIE_BYTES = 72
S_BYTES = KEY_BYTES + TAG  # an encrypted static key


def prologue(responder_id: str) -> bytes:
    return PROLOGUE_PREFIX + wire.encode_id(responder_id)


class Welcome(NamedTuple):
    """What the initiator learns from WELCOME."""

    responder_key: bytes
    responder_index: int
    incarnation: int
    cookie: bytes
    responder_id: str


class Initiate(NamedTuple):
    """What the responder learns from INITIATE."""

    initiator_key: bytes
    incarnation: int
    initiator_id: str
    keys: tuple[bytes, bytes]  # (initiator -> responder, responder -> initiator)


def _decode_id(raw: bytes) -> str:
    if not raw or raw[0] != len(raw) - 1 or raw[0] == 0:
        raise HandshakeError("malformed node id in a handshake")
    try:
        return raw[1:].decode("utf-8")
    except UnicodeDecodeError as exc:
        raise HandshakeError("node id is not UTF-8") from exc


def hello(e: NodeKey, responder_id: str, index: int) -> tuple[SymmetricState, bytes]:
    """The initiator's first message: its ephemeral key and its session index."""
    sym = SymmetricState(prologue(responder_id))
    sym.mix_hash(e.public)
    payload = INDEX.pack(index)
    sym.encrypt_and_hash(payload)  # no key yet: in clear, hashed
    return sym, e.public + payload


def respond(static: NodeKey, own_id: str, e: NodeKey, initiator_e: bytes, initiator_index: int,
            responder_index: int, incarnation: int, cookie: bytes
            ) -> tuple[SymmetricState, bytes]:
    """The responder's WELCOME (Noise message 2) and its state after writing it."""
    sym = SymmetricState(prologue(own_id))
    sym.mix_hash(initiator_e)
    sym.decrypt_and_hash(INDEX.pack(initiator_index))
    sym.mix_hash(e.public)
    try:
        sym.mix_key(e.dh(initiator_e))
        enc_s = sym.encrypt_and_hash(static.public)
        sym.mix_key(static.dh(initiator_e))
    except ValueError as exc:  # a low-order point
        raise HandshakeError("degenerate ephemeral key") from exc
    payload = (INDEX.pack(responder_index) + INCARNATION.pack(incarnation) + cookie
               + wire.encode_id(own_id))
    return sym, e.public + enc_s + sym.encrypt_and_hash(payload)


def read_welcome(sym: SymmetricState, e: NodeKey, msg: bytes) -> tuple[Welcome, bytes]:
    """The initiator reads WELCOME; returns it and the responder's ephemeral key."""
    if len(msg) < KEY_BYTES + S_BYTES + INDEX.size + INCARNATION.size + COOKIE_BYTES + 2 + TAG:
        raise HandshakeError("WELCOME cut short")
    re = msg[:KEY_BYTES]
    sym.mix_hash(re)
    try:
        sym.mix_key(e.dh(re))
        rs = sym.decrypt_and_hash(msg[KEY_BYTES:KEY_BYTES + S_BYTES])
        sym.mix_key(e.dh(rs))
    except ValueError as exc:
        raise HandshakeError("degenerate key in WELCOME") from exc
    p = sym.decrypt_and_hash(msg[KEY_BYTES + S_BYTES:])
    (index,) = INDEX.unpack_from(p, 0)
    (inc,) = INCARNATION.unpack_from(p, 4)
    cookie = p[12:12 + COOKIE_BYTES]
    return Welcome(rs, index, inc, cookie, _decode_id(p[12 + COOKIE_BYTES:])), re


def initiate(sym: SymmetricState, static: NodeKey, re: bytes, own_id: str, incarnation: int
             ) -> tuple[bytes, tuple[bytes, bytes]]:
    """The initiator's INITIATE (Noise message 3) and the transport keys."""
    enc_s = sym.encrypt_and_hash(static.public)
    try:
        sym.mix_key(static.dh(re))
    except ValueError as exc:
        raise HandshakeError("degenerate ephemeral key") from exc
    msg = enc_s + sym.encrypt_and_hash(INCARNATION.pack(incarnation) + wire.encode_id(own_id))
    return msg, sym.split()


def read_initiate(sym: SymmetricState, e: NodeKey, msg: bytes) -> Initiate:
    """The responder reads INITIATE (after :func:`respond` rebuilt its state)."""
    if len(msg) < S_BYTES + INCARNATION.size + 2 + TAG:
        raise HandshakeError("INITIATE cut short")
    rs = sym.decrypt_and_hash(msg[:S_BYTES])
    try:
        sym.mix_key(e.dh(rs))
    except ValueError as exc:
        raise HandshakeError("degenerate static key") from exc
    p = sym.decrypt_and_hash(msg[S_BYTES:])
    (inc,) = INCARNATION.unpack_from(p, 0)
    return Initiate(rs, inc, _decode_id(p[INCARNATION.size:]), sym.split())
