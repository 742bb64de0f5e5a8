"""Association sources: where a node learns the address of a node id it has not heard from.

A resolver is any callable ``node_id -> address | None``. Learnt associations (from traffic)
and ones registered by hand take precedence; the resolver is asked on a miss.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping

Address = Hashable
Resolver = Callable[[str], "Address | None"]


class StaticDiscovery:
    """A fixed map of node id to address."""

    def __init__(self, mapping: Mapping[str, Address]) -> None:
        self._map = dict(mapping)

    def __call__(self, node_id: str) -> Address | None:
        return self._map.get(node_id)


def parse_association_lines(text: str) -> dict[str, tuple[str, int]]:
    """Parse ``id,host,port`` lines (``#`` comments and blank lines ignored)."""
    out: dict[str, tuple[str, int]] = {}
    for lineno, line in enumerate(text.splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        parts = [p.strip() for p in line.split(",")]
        if len(parts) != 3 or not parts[0] or not parts[2].isdigit():
            raise ValueError(f"line {lineno}: expected 'id,host,port', got {line!r}")
        out[parts[0]] = (parts[1], int(parts[2]))
    return out
