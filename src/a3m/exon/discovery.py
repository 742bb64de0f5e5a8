"""Association sources: where a node learns the address of a node id it has not heard from.

A resolver is any callable ``node_id -> address | None``; one with a ``public_key(node_id)``
method also pins the keys it knows. Learnt associations (from traffic)
and ones registered by hand take precedence; the resolver is asked on a miss.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping

from a3m.errors import UsageError
from a3m.exon.secure.keys import parse_public_key

Address = Hashable
Resolver = Callable[[str], "Address | None"]


class StaticDiscovery:
    """A fixed map of node id to address, and optionally of node id to public key: a source
    that knows a node's key pins it (no other key may speak as that id)."""

    def __init__(self, mapping: Mapping[str, Address],
                 keys: Mapping[str, str | bytes] | None = None) -> None:
        self._map = dict(mapping)
        self._keys = {k: parse_public_key(v) for k, v in (keys or {}).items()}

    def __call__(self, node_id: str) -> Address | None:
        return self._map.get(node_id)

    def public_key(self, node_id: str) -> bytes | None:
        """The key ``node_id`` must speak with, if this source knows it."""
        return self._keys.get(node_id)

    def nodes(self) -> list[str]:
        """Every node id this source knows (a RADIO looks for group members among them)."""
        return list(self._map)


def parse_directory(text: str) -> tuple[dict[str, tuple[str, int]], dict[str, bytes]]:
    """Parse ``id,host,port[,public key]`` lines (``#`` comments and blank lines ignored):
    the addresses, and the keys of the lines that have one (64 hex digits)."""
    out: dict[str, tuple[str, int]] = {}
    keys: dict[str, bytes] = {}
    for lineno, line in enumerate(text.splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        parts = [p.strip() for p in line.split(",")]
        if len(parts) not in (3, 4) or not parts[0] or not parts[2].isdigit():
            raise ValueError(f"line {lineno}: expected 'id,host,port[,key]', got {line!r}")
        out[parts[0]] = (parts[1], int(parts[2]))
        if len(parts) == 4:
            try:
                keys[parts[0]] = parse_public_key(parts[3])
            except UsageError as exc:
                raise ValueError(f"line {lineno}: {exc}") from exc
    return out, keys


def parse_association_lines(text: str) -> dict[str, tuple[str, int]]:
    """Parse ``id,host,port[,key]`` lines into addresses (see :func:`parse_directory`)."""
    return parse_directory(text)[0]
