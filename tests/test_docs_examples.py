"""Every fenced Python example of the documentation runs (docs/**/*.md and the README).

Each ```python block is run as a program of its own, in a fresh interpreter, as a reader
would paste it. A block that is not a whole program (a fragment, a listing of calls, an
example that needs a Spark session or fixed addresses) says so on the line before it:

    <!-- example: skip (the reason, which the test report shows) -->

Any other ``<!-- example: NAME -->`` comment only names the block. The comment is invisible
on the rendered page. Examples are kept small and bounded: every wait has a timeout.
"""

from __future__ import annotations

import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = sorted(p for p in (ROOT / "docs").rglob("*.md") if "_build" not in p.parts)
PAGES.append(ROOT / "README.md")

_FENCE = re.compile(r"^```python[ \t]*\n(.*?)^```[ \t]*$", re.S | re.M)
_MARK = re.compile(r"<!--\s*example:\s*(.*?)\s*-->\s*$")
_SKIP = re.compile(r"skip\s*\((.+)\)\s*$", re.S)
#: One example's bound: a node's close lingers in the background for a few seconds, and the
#: interpreter waits (at most 2 s) for lingering nodes whose peers still speak.
TIMEOUT_S = 120


@dataclass(frozen=True)
class Example:
    page: Path
    line: int
    code: str
    skip: str | None

    @property
    def name(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def examples(page: Path) -> list[Example]:
    text = page.read_text(encoding="utf-8")
    found = []
    for m in _FENCE.finditer(text):
        line = text.count("\n", 0, m.start()) + 1
        before = text[:m.start()].rstrip("\n").rsplit("\n", 1)[-1]
        mark = _MARK.search(before)
        skip = _SKIP.match(mark.group(1)) if mark else None
        found.append(Example(page, line, m.group(1), skip.group(1) if skip else None))
    return found


ALL = [ex for page in PAGES for ex in examples(page)]


def test_the_guide_has_examples_and_most_run() -> None:
    """The extraction finds the blocks (a changed fence would silently test nothing), and
    skipping stays the exception."""
    pages = {ex.page.name for ex in ALL}
    assert {"index.md", "nodes.md", "patterns.md", "cookies.md", "asyncio.md",
            "security.md"} <= pages
    run = [ex for ex in ALL if ex.skip is None]
    assert len(run) >= 15 and len(run) > 2 * (len(ALL) - len(run))


@pytest.mark.timeout(TIMEOUT_S + 30)
@pytest.mark.parametrize("example", ALL, ids=[ex.name for ex in ALL])
def test_example_runs(example: Example) -> None:
    if example.skip is not None:
        pytest.skip(example.skip)
    done = subprocess.run([sys.executable, "-c", example.code], capture_output=True,
                          text=True, timeout=TIMEOUT_S, cwd=ROOT)
    assert done.returncode == 0, f"{example.name}:\n{done.stderr[-3000:]}"
