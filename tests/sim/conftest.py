"""Count the messages the simulation tests push through, and print the total at the end."""

from __future__ import annotations

from typing import Any

SIMULATED: dict[str, int] = {"messages": 0, "runs": 0}


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if SIMULATED["runs"]:
        terminalreporter.write_line(
            f"simulation: {SIMULATED['messages']:,} messages in {SIMULATED['runs']} runs, "
            "each checked exactly-once")
