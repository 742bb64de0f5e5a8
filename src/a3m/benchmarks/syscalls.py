"""This process's system calls over a measured stretch, counted by ``perf stat``: the kernel's
``raw_syscalls:sys_enter`` tracepoint on every thread of the process (those it has when perf
attaches and those started later), for the stretch only.

perf is started when the counter is made, with its events disabled (``--delay -1``), and the
counter waits until perf answers on its control pipe (``--control``): perf's start-up (a
tenth of a second) stays out of every measured stretch, this process's and its peer's.
:meth:`SyscallCounter.enable` and :meth:`SyscallCounter.disable` switch the events on and
off, each waiting for perf's acknowledgement; :meth:`SyscallCounter.stop` ends perf (SIGINT)
and reads its count. The counter's own calls inside the stretch (the acknowledgement's
read after ``enable``; the ``disable`` command's write and the wait for its answer) are
counted like the others: with :class:`a3m.benchmarks.work.Work`'s two ``getrusage``, five a
stretch.

Where perf is missing or may not trace (not root and ``perf_event_paranoid`` too high, no
tracefs), the count is None and :attr:`SyscallCounter.why` says why.
"""

from __future__ import annotations

import os
import select
import shutil
import signal
import subprocess
import time
import weakref

#: The tracepoint counted: every system call's entry.
EVENT = "raw_syscalls:sys_enter"
#: How long perf may take to attach, or to answer a command, before it is given up.
ATTACH_TIMEOUT_S = 10.0


def parse_perf_stat(text: str, event: str = EVENT) -> int | None:
    """The count of ``event`` in ``perf stat -x,`` output (its CSV lines: count, unit, event,
    ...), or None when perf printed none (``<not counted>``, ``<not supported>``, absent)."""
    for line in text.splitlines():
        cols = line.strip().split(",")
        if len(cols) > 2 and cols[2].split("/")[0] == event:
            return int(cols[0]) if cols[0].isdigit() else None
    return None


def _first_words(text: str) -> str:
    """perf's own words, on one line: the first few lines of what it printed."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return " ".join(lines[:3])[:240] or "no output"


class SyscallCounter:
    """``perf stat`` attached to this process, its events off until :meth:`enable`."""

    def __init__(self) -> None:
        #: Why there is no count (None while perf is attached or has counted).
        self.why: str | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._ctl = self._ack = -1
        perf = shutil.which("perf")
        if perf is None:
            self.why = "perf is not on PATH"
            return
        ctl_r, ctl_w = os.pipe()
        ack_r, ack_w = os.pipe()
        try:
            self._proc = subprocess.Popen(
                [perf, "stat", "-x", ",", "-e", EVENT, "-p", str(os.getpid()), "--delay", "-1",
                 "--control", f"fd:{ctl_r},{ack_w}"],
                pass_fds=(ctl_r, ack_w), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE, start_new_session=True)  # (a Ctrl-C is not for perf)
        except OSError as exc:
            self.why = f"perf did not start: {exc}"
            for fd in (ctl_r, ctl_w, ack_r, ack_w):
                os.close(fd)
            return
        os.close(ctl_r)  # (perf's ends)
        os.close(ack_w)
        self._ctl, self._ack = ctl_w, ack_r
        # Never left running: perf also ends when this process does.
        self._finalizer = weakref.finalize(self, _end, self._proc, ctl_w, ack_r)
        if not self._command("ping"):  # attached: it answers only from its main loop
            self._fail("perf did not attach")

    @property
    def attached(self) -> bool:
        return self._proc is not None

    def _command(self, what: str) -> bool:
        """Send perf a control command and wait for its ``ack``; False if none came (perf
        ended, or is stuck)."""
        try:
            os.write(self._ctl, what.encode() + b"\n")
        except OSError:
            return False
        got = b""
        end = time.monotonic() + ATTACH_TIMEOUT_S
        while b"ack" not in got:
            left = end - time.monotonic()
            if left <= 0 or not select.select([self._ack], [], [], left)[0]:
                return False
            chunk = os.read(self._ack, 64)
            if not chunk:
                return False
            got += chunk
        return True

    def _fail(self, what: str) -> None:
        proc = self._proc
        self._proc = None
        if proc is None:
            return
        if proc.poll() is None:
            proc.kill()
        try:
            err = proc.communicate(timeout=5)[1]
        except subprocess.TimeoutExpired:
            err = b""
        code = f", exit status {proc.returncode}" if proc.returncode else ""
        self.why = f"{what}{code}: {_first_words(err.decode(errors='replace'))}"
        self._finalizer()

    def enable(self) -> None:
        """Count from now on (back when perf has switched its events on)."""
        if self._proc is not None and not self._command("enable"):
            self._fail("perf did not answer 'enable'")

    def disable(self) -> None:
        """Stop counting (back when perf has switched its events off)."""
        if self._proc is not None and not self._command("disable"):
            self._fail("perf did not answer 'disable'")

    def stop(self) -> int | None:
        """End perf and return the system calls it counted while enabled (None: see
        :attr:`why`)."""
        proc = self._proc
        if proc is None:
            return None
        self._proc = None
        proc.send_signal(signal.SIGINT)  # perf prints its counts and exits
        try:
            err = proc.communicate(timeout=ATTACH_TIMEOUT_S)[1].decode(errors="replace")
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            err = ""
        self._finalizer()
        count = parse_perf_stat(err)
        if count is None:
            self.why = f"perf printed no count: {_first_words(err)}"
        return count


def _end(proc: subprocess.Popen[bytes], *fds: int) -> None:
    if proc.poll() is None:
        proc.kill()
        proc.wait()
    for fd in fds:
        try:
            os.close(fd)
        except OSError:
            pass
