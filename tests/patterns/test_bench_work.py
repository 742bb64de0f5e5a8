"""The benchmarks' work counters (``a3m.benchmarks.work``, ``a3m.benchmarks.syscalls``):
perf's output read, a missing or unusable perf said once, the allocations and system calls of
a stretch counted where they can be. No figure of this machine's speed is checked."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

import pytest

from a3m.benchmarks import syscalls, work
from a3m.benchmarks.syscalls import SyscallCounter, parse_perf_stat
from a3m.benchmarks.work import Work, hoist_why, total

#: ``perf stat -x, -e raw_syscalls:sys_enter -p PID --delay -1 --control ...`` on stderr.
PERF_OUTPUT = """Events disabled
Events enabled
Events disabled
1533,,raw_syscalls:sys_enter,1801436,100.00,,
"""


def test_perf_s_count_is_read_from_its_csv_line() -> None:
    assert parse_perf_stat(PERF_OUTPUT) == 1533
    other = "12,,syscalls:sys_enter_read,100,100.00,,\n" + PERF_OUTPUT
    assert parse_perf_stat(other) == 1533  # (only the event asked for)


@pytest.mark.parametrize("text", [
    "<not counted>,,raw_syscalls:sys_enter,0,0.00,,\n",
    "<not supported>,,raw_syscalls:sys_enter,0,100.00,,\n",
    "Events disabled\n",
    "",
])
def test_no_count_in_perf_s_output_is_none(text: str) -> None:
    assert parse_perf_stat(text) is None


def test_without_perf_the_count_is_none_and_the_reason_kept(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(syscalls.shutil, "which", lambda name: None)
    counter = SyscallCounter()
    assert not counter.attached and counter.why == "perf is not on PATH"
    counter.enable()
    counter.disable()
    assert counter.stop() is None
    w = Work(allocations=False, syscalls=True)
    w.start()
    out = w.report(10)
    assert out["syscalls"] is None and out["syscalls_why"] == "perf is not on PATH"
    assert out["allocations"] is None and "allocations_why" not in out  # (not asked for)


def test_a_perf_that_refuses_gives_its_own_words(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """A perf on PATH that may not trace (no permission, no tracefs): its message is the
    reason, and nothing hangs."""
    fake = tmp_path / "perf"
    fake.write_text("#!/bin/sh\necho 'Error: No permission to enable raw_syscalls:sys_enter "
                    "event.' >&2\nexit 255\n")
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ.get('PATH', '')}")
    counter = SyscallCounter()
    assert not counter.attached
    assert counter.why is not None and "No permission" in counter.why, counter.why
    assert "exit status 255" in counter.why
    assert counter.stop() is None


def test_the_system_calls_of_a_stretch_are_counted() -> None:
    """Where perf may trace here: a stretch of 2 000 system calls (every thread's) counts at
    least those, and what this process did before and after the stretch is left out."""
    counter = SyscallCounter()
    if not counter.attached:
        pytest.skip(f"perf cannot count here: {counter.why}")
    for _ in range(5000):  # before the stretch: not counted
        os.getppid()
    counter.enable()
    for _ in range(2000):
        os.getppid()
    counter.disable()
    for _ in range(5000):  # after it: not counted
        os.getppid()
    got = counter.stop()
    assert got is not None and 2000 <= got < 2100, got


def test_work_counts_allocations_where_the_native_counter_is() -> None:
    if work.alloc_counter()[0] is None:
        pytest.skip(work.alloc_counter()[1])
    w = Work(syscalls=False)
    w.start()
    keep = [object() for _ in range(5000)]
    out = w.report(100)
    assert len(keep) == 5000 and out["allocations"] >= 50, out  # 5 000 over 100
    assert "allocations_why" not in out


def test_without_the_native_module_allocations_are_none(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(work, "alloc_counter", lambda: (None, "a3m._native is not built"))
    w = Work(syscalls=False)
    w.start()
    out = w.report(10)
    assert out["allocations"] is None and out["allocations_why"] == "a3m._native is not built"


def test_the_pure_python_run_loads_no_counter(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("A3M_PURE_PYTHON", "1")
    counter, why = work.alloc_counter()
    assert counter is None and "A3M_PURE_PYTHON" in why


def test_the_reasons_are_kept_once_and_the_sides_added_up() -> None:
    sides: dict[str, Any] = {
        "client": {"cpu_us": 10.0, "wakeups": 1.0, "allocations": 5.0, "syscalls": None,
                   "syscalls_why": "perf is not on PATH"},
        "server": {"cpu_us": 20.0, "wakeups": 0.5, "allocations": 7.5, "syscalls": None,
                   "syscalls_why": "perf is not on PATH"},
    }
    result: dict[str, Any] = {}
    hoist_why(result, list(sides.values()))
    assert result == {"syscalls_why": "perf is not on PATH"}
    assert all("syscalls_why" not in s for s in sides.values())
    assert total(sides) == {"cpu_us": 30.0, "wakeups": 1.5, "py_calls": None,
                            "allocations": 12.5, "syscalls": None}
    assert total({"client": sides["client"], "server": None})["cpu_us"] is None
    assert total(None)["cpu_us"] is None


def test_the_asyncio_bench_gives_its_nodes_the_busy_poll_asked_for(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """``a3m bench reqrep --asyncio --busy-poll-s S`` reaches a3m.aio's nodes (it was once
    taken and dropped: every such run polled with the default)."""
    import asyncio

    import a3m.aio
    from a3m.benchmarks import aio

    made: list[dict[str, Any]] = []
    real = a3m.aio.Node

    def recorded(*args: Any, **kw: Any) -> Any:
        made.append(kw)
        return real(*args, **kw)

    monkeypatch.setattr(a3m.aio, "Node", recorded)
    report = asyncio.run(aio.a3m_one_process("reqrep", 20, 64, busy_poll_s=0.0))
    assert report["round_trips"] >= 19
    assert [kw.get("busy_poll_s") for kw in made] == [0.0, 0.0]
    made.clear()
    asyncio.run(aio.a3m_one_process("reqrep", 20, 64))
    assert made and all("busy_poll_s" not in kw for kw in made)
