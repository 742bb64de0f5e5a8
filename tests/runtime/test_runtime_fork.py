"""A process that forks while its nodes stream (issue 39: "a process that exits or forks does
not hang on the native thread"). The child inherits copies of the parent's nodes without their
I/O threads (threads do not survive a fork); it makes nodes of its own, which work, and exits
normally; the parent's stream goes on, its link intact."""

from __future__ import annotations

import atexit
import os
import sys
import threading
import time

import pytest

import a3m

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="no os.fork here")


def _wait_child(pid: int, timeout: float) -> int | None:
    """The child's exit status, or None if it is still running after ``timeout`` (killed)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return status
        time.sleep(0.01)
    os.kill(pid, 9)
    os.waitpid(pid, 0)
    return None


def _linked(tx: a3m.Node, rx: a3m.Node) -> tuple[a3m.Socket, a3m.Socket]:
    """A PUSH on ``tx`` linked to a PULL on ``rx``: (push, pull)."""
    pull = rx.socket(a3m.PULL, "in")
    tx.associate(rx.id, rx.address)
    push = tx.socket(a3m.PUSH, "out")
    push.link((rx.id, "in"))
    assert push.wait_linked(timeout=20)
    return push, pull


def _child() -> None:
    """In the forked child: fresh nodes work; then a normal exit (atexit runs)."""
    code = 1
    try:
        with a3m.Node("fork-child-a", bind="127.0.0.1:0") as a, \
                a3m.Node("fork-child-b", bind="127.0.0.1:0") as b:
            push, pull = _linked(a, b)
            push.send(b"from the child", timeout=20)
            assert pull.recv(timeout=20) == b"from the child"
        code = 0
        # A normal exit's work: the parent's copied nodes meet atexit without their threads.
        # (Run here: under pytest, SystemExit would be caught and the child would go on.)
        atexit._run_exitfuncs()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def test_a_fork_during_a_stream_hangs_neither_process() -> None:
    with a3m.Node("fork-rx", bind="127.0.0.1:0") as rx, \
            a3m.Node("fork-tx", bind="127.0.0.1:0") as tx:
        push, pull = _linked(tx, rx)
        stop = threading.Event()
        got = [0]

        def pump() -> None:
            i = 0
            while not stop.is_set():
                try:
                    push.send(b"m%d" % i, timeout=1)
                    i += 1
                except a3m.Timeout:
                    pass

        def drain() -> None:
            while not stop.is_set():
                try:
                    pull.recv(timeout=0.2)
                    got[0] += 1
                except a3m.Timeout:
                    pass

        threads = [threading.Thread(target=pump), threading.Thread(target=drain)]
        for t in threads:
            t.start()
        try:
            end = time.monotonic() + 20
            while got[0] < 100 and time.monotonic() < end:
                time.sleep(0.01)
            assert got[0] >= 100
            pid = os.fork()
            if pid == 0:  # pragma: no cover (the child's outcome is its exit status)
                _child()
            status = _wait_child(pid, 60)
            assert status is not None, "the forked child hung"
            assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
            before = got[0]
            end = time.monotonic() + 20
            while got[0] < before + 100 and time.monotonic() < end:
                time.sleep(0.01)
            assert got[0] >= before + 100  # the parent's stream goes on
            assert len(push.links) == 1
        finally:
            stop.set()
            for t in threads:
                t.join(10)
