from __future__ import annotations

import subprocess
import sys


def test_help_lists_commands() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "a3m", "--help"], capture_output=True, text=True, check=True
    ).stdout
    for name in ("demo", "bench", "chaos", "audit"):
        assert name in out
