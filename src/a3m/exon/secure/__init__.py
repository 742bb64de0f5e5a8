"""Secure associations for Exon (``docs/exon-wire.md``, "Secure associations").

Every datagram between two nodes is sealed with ChaCha20-Poly1305 under keys from a Noise XX
handshake (X25519, SHA-256) bound to both nodes' long-term keys and incarnations. The layer is
sans-I/O like the rest of Exon: :class:`SecureLayer` takes datagrams, the time and entropy, and
returns what to send.
"""

from a3m.exon.secure.keys import NodeKey, format_public_key, parse_public_key
from a3m.exon.secure.layer import SecureLayer
from a3m.exon.secure.trust import TrustStore

__all__ = ["NodeKey", "SecureLayer", "TrustStore", "format_public_key",
           "parse_public_key"]
