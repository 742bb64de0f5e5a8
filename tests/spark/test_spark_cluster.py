"""Issue 15, item 3: the pipeline on a real Spark standalone cluster, a master and two workers
started from the pyspark install. Producers -> the a3m source -> Spark -> the idempotent a3m
sink -> a PULL socket here, with a worker SIGKILLed mid-stream (its executor goes with it;
Spark runs the tasks again on the other) and a driver restart (a new driver process resumes
the query from its checkpoint while producers keep sending). Each message
must come out exactly once after the receiver's Deduplicator. Bounded in time; skipped only
without Java."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

import a3m
from a3m.spark.idempotent import Deduplicator

from .peer import draining

pytestmark = pytest.mark.skipif(shutil.which("java") is None, reason="needs Java (Spark)")

TOTAL = 3000


def _port(kind: int = socket.SOCK_STREAM) -> int:
    with socket.socket(socket.AF_INET, kind) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _spark_class() -> str:
    import pyspark

    return str(Path(pyspark.__file__).parent / "bin" / "spark-class")


def _daemon(args: list[str], log: Path) -> subprocess.Popen[bytes]:
    env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1", PYSPARK_PYTHON=sys.executable,
               SPARK_NO_DAEMONIZE="1")
    return subprocess.Popen([_spark_class(), *args], stdout=log.open("wb"),
                            stderr=subprocess.STDOUT, env=env, start_new_session=True)


def _kill(proc: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # the worker and the executors it started
    except ProcessLookupError:
        pass
    proc.wait(10)


def _wait(cond: Any, limit: float, what: str, procs: list[subprocess.Popen[bytes]]) -> None:
    deadline = time.monotonic() + limit
    while not cond():
        for p in procs:
            if p.poll() is not None and p.returncode != 0:
                raise AssertionError(f"{what}: {p.args!r} exited {p.returncode}")
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


@pytest.mark.spark
def test_exactly_once_on_a_two_worker_cluster_with_a_killed_worker_and_a_new_driver(
        tmp_path: Path) -> None:
    mport = _port()
    master_url = f"spark://127.0.0.1:{mport}"
    daemons = [_daemon(["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                        "--port", str(mport), "--webui-port", "0"], tmp_path / "master.log")]
    driver = None
    try:
        for i in range(2):
            work = tmp_path / f"worker-{i}"
            work.mkdir()
            daemons.append(_daemon(["org.apache.spark.deploy.worker.Worker", master_url,
                                    "--host", "127.0.0.1", "--cores", "1", "--memory", "1g",
                                    "--webui-port", "0", "--work-dir", str(work)],
                                   tmp_path / f"worker-{i}.log"))
        _wait(lambda: all("Successfully registered with master" in
                          (tmp_path / f"worker-{i}.log").read_text(errors="replace")
                          for i in range(2)), 90, "two workers registered", daemons)
        with a3m.Node("cluster-peer") as peer, a3m.Node("cluster-producer") as prod:
            pull = peer.socket(a3m.PULL, "rows")
            with draining(pull) as got:
                bind_port = _port(socket.SOCK_DGRAM)
                host, port = peer.address
                work = tmp_path / "job"
                work.mkdir()

                def start_driver(phase: str) -> subprocess.Popen[bytes]:
                    return subprocess.Popen(
                        [sys.executable, str(Path(__file__).with_name("cluster_job.py")), phase,
                         master_url, str(work), f"127.0.0.1:{bind_port}",
                         f"cluster-peer={host}:{port}"],
                        stdout=(tmp_path / f"driver-{phase}.log").open("wb"),
                        stderr=subprocess.STDOUT, start_new_session=True)

                driver = start_driver("first")
                _wait(lambda: (work / "started").exists(), 120, "the query started", [driver])
                prod.associate("cluster-collector", ("127.0.0.1", bind_port))
                push = prod.socket(a3m.PUSH, "out")
                push.link(("cluster-collector", "readings"))
                assert push.wait_linked(timeout=60)
                dedup = Deduplicator()
                seen: set[bytes] = set()

                taken = 0  # messages of `got` already through the Deduplicator

                def counted() -> int:
                    nonlocal taken
                    fresh = got[taken:]  # the drainer may append meanwhile: count the slice
                    taken += len(fresh)
                    for m in fresh:
                        p = dedup.accept(m)
                        if p is not None:
                            assert p not in seen, f"{p!r} twice"
                            seen.add(p)
                    return len(seen)

                push.send_many([b"m-%d" % i for i in range(1000)], timeout=60)
                _wait(lambda: counted() >= 500, 120, "500 rows through the cluster", [driver])
                _kill(daemons[1])  # a worker dies mid-stream, its executor with it
                push.send_many([b"m-%d" % i for i in range(1000, 2000)], timeout=60)
                _wait(lambda: counted() >= 1500, 180, "1500 rows after the kill", [driver])
                (work / "restart").write_text("")
                assert driver.wait(120) == 0, (tmp_path / "driver-first.log").read_text()[-3000:]
                push.send_many([b"m-%d" % i for i in range(2000, 2500)], timeout=60)  # no driver
                driver = start_driver("second")
                _wait(lambda: (work / "restarted").exists(), 120, "a new driver", [driver])
                push.send_many([b"m-%d" % i for i in range(2500, TOTAL)], timeout=60)
                _wait(lambda: counted() >= TOTAL, 180, f"{TOTAL} rows", [driver])
                time.sleep(1.0)
                assert counted() == TOTAL  # nothing more: no duplicate came late
                (work / "done").write_text("")
                assert driver.wait(120) == 0, (tmp_path / "driver-second.log").read_text()[-3000:]
    finally:
        if driver is not None and driver.poll() is None:
            os.killpg(driver.pid, signal.SIGKILL)
            driver.wait(10)
        for d in daemons:
            _kill(d)
    assert seen == {b"m-%d" % i for i in range(TOTAL)}
    assert dedup.accepted == TOTAL
    assert "Lost executor" in (tmp_path / "driver-first.log").read_text(errors="replace")
