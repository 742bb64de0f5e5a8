"""The protocol cores stay sans-I/O: no sockets, threads, clocks or global randomness."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "a3m"
PURE = ["exon", "core", "patterns"]
FORBIDDEN = {"socket", "threading", "asyncio", "time", "select", "selectors", "random"}
# random.Random may be type-annotated/injected; only `import random` at module level is banned,
# `from random import Random` is allowed for annotations.
ALLOWED_FROM = {("random", "Random")}


def _violations(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    out = []
    for node in tree.body:  # module level only: lazy imports inside functions are deliberate
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in FORBIDDEN:
                    out.append(f"{path.name}: import {alias.name}")
        elif isinstance(node, ast.ImportFrom) and node.module:
            root = node.module.split(".")[0]
            if root in FORBIDDEN:
                for alias in node.names:
                    if (root, alias.name) not in ALLOWED_FROM:
                        out.append(f"{path.name}: from {node.module} import {alias.name}")
            if node.module.startswith("a3m.runtime") or node.module.startswith("a3m.aio"):
                out.append(f"{path.name}: imports {node.module} (wrong direction)")
    return out


@pytest.mark.parametrize("package", PURE)
def test_pure_packages_do_no_io(package: str) -> None:
    bad: list[str] = []
    for path in sorted((SRC / package).rglob("*.py")):
        bad += _violations(path)
    assert bad == []
