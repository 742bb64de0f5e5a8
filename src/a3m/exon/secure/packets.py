"""The outer datagram formats of wire version 4 (``docs/exon-wire.md``, "Secure associations").

Every datagram starts with the version byte and a type byte. ``PLAIN`` carries an Exon
datagram in clear (the opt-out); the others belong to the secure layer. Sizes are fixed except
where a length says otherwise; integers are big-endian.
"""

from __future__ import annotations

import struct
from typing import Final

from a3m.exon import wire

VERSION: Final = wire.VERSION
PLAIN: Final = 0x00
HELLO: Final = 0x01
WELCOME: Final = 0x02
INITIATE: Final = 0x03
RETRY: Final = 0x04
DATA: Final = 0x05
CHALLENGE: Final = 0x06
RESPONSE: Final = 0x07

#: version, type, receiver's session index, packet counter; then ciphertext and tag.
SEALED_HDR: Final = struct.Struct(">BBIQ")
SEALED_OVERHEAD: Final = SEALED_HDR.size + 16
#: HELLO is padded to this size, so a WELCOME (at most 442 bytes) stays under 3x it.
HELLO_SIZE: Final = 256
#: version, type, token length (0 or TOKEN_BYTES); then token, e (32), index (4), zeros.
HELLO_HDR: Final = struct.Struct(">BBB")
TOKEN_BYTES: Final = 24
#: version, type, initiator's index; then the Noise message 2.
WELCOME_HDR: Final = struct.Struct(">BBI")
#: version, type, initiator's index; then e (32), cookie (72), Noise message 3.
INITIATE_HDR: Final = struct.Struct(">BBI")
#: version, type, initiator's index; then the address token.
RETRY_HDR: Final = struct.Struct(">BBI")
CHALLENGE_BYTES: Final = 8
