"""Suite-wide set-up: nodes keep their keys in a directory of the test run, not the user's."""

from __future__ import annotations

import os
import shutil
import tempfile
from typing import Any

_STATE: list[str] = []


def pytest_configure(config: Any) -> None:
    # Nodes named by the application keep their long-term key in the user's key directory
    # (a3m.runtime.identity); the suite's nodes (and the processes it starts) use a fresh one.
    _STATE.append(tempfile.mkdtemp(prefix="a3m-test-state-"))
    os.environ["A3M_STATE_DIR"] = _STATE[-1]


def pytest_unconfigure(config: Any) -> None:
    for path in _STATE:
        shutil.rmtree(path, ignore_errors=True)
