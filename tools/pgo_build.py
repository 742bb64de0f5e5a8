"""Build the compiled fast path guided by a profile (``make`` runs this after ``pip install``).

With GCC 10 or later (``a3m._compiled.PGO_MIN_GCC``) the compiled modules are built twice, in
place, with a training run between:

1. with counters (``A3M_PGO=generate``: ``a3m._compiled.compile_flags``);
2. a short training run: the workloads the benchmarks measure, A3M alone (the REQ/REP round
   trip threaded with and without the busy poll and under asyncio, a PUSH/PULL stream one
   message and 64 messages a call, PUB/SUB), each in its own processes, as a user runs them;
3. again with the counts (``A3M_PGO=use``): GCC lays the code that ran hot out together and
   the rest apart, so a round trip's code spans fewer cache lines.

A sleeping round trip through the profile-guided build took 10-12 % less than through the
plain build (docs/performance.md, "The compiled fast path"). Without that GCC, with
``A3M_PGO=0``, when a build fails or when no training workload runs to the end: one plain
build, which ``setup.py`` itself leaves as the Python sources if it fails too. The last line
printed says which build is in place; ``a3m bench``'s ``machine`` says it too
(``profile_guided``)::

    .venv/bin/python tools/pgo_build.py
"""

from __future__ import annotations

import json
import os
import runpy
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
#: ``a3m bench`` workloads run on the instrumented build (A3M only, small counts).
TRAINING = (
    ("reqrep", "--messages", "4000", "--busy-poll-s", "0"),
    ("reqrep", "--messages", "4000"),
    ("reqrep", "--asyncio", "--messages", "3000", "--loops", "asyncio"),
    ("pushpull", "--messages", "200000"),
    ("pushpull", "--messages", "200000", "--batch", "64"),
    ("pubsub", "--messages", "100000"),
)
#: (each takes seconds; a machine 20 times slower still fits)
TRAINING_TIMEOUT_S = 120


def _this_tree() -> dict[str, str]:
    """The environment of a run of this tree's package (its ``src`` first on the path:
    the training counts the modules just built, whichever tree pip installed)."""
    path = os.environ.get("PYTHONPATH", "")
    return {**os.environ, "PYTHONPATH": str(ROOT / "src") + (os.pathsep + path if path else "")}


#: ``a3m/_compiled.py``'s names (run from its file: importing ``a3m`` would choose between
#: the compiled modules and the sources this script rebuilds).
COMPILED: dict[str, Any] = runpy.run_path(str(ROOT / "src" / "a3m" / "_compiled.py"))
PGO_ENV: str = COMPILED["PGO_ENV"]


def build(stage: str) -> bool:
    """``setup.py build_ext --inplace`` of the compiled modules alone, at ``stage`` of the
    profile (empty: none); True when the build left compiled modules that import."""
    env = {k: v for k, v in os.environ.items() if k not in ("A3M_NO_MYPYC_BUILD", PGO_ENV)}
    env["A3M_NO_NATIVE_BUILD"] = "1"  # (pip built the native module; it does not change)
    if stage:
        env[PGO_ENV] = stage
    print(f"a3m: building the compiled modules{f' ({stage})' if stage else ''}", flush=True)
    subprocess.run([sys.executable, "setup.py", "-q", "build_ext", "--inplace", "--force"],
                   cwd=ROOT, env=env, check=False)
    probe = subprocess.run([sys.executable, "-W", "error::RuntimeWarning", "-c",
                            "import a3m; print(a3m.COMPILED)"],
                           cwd=ROOT, env=_this_tree(), capture_output=True, text=True,
                           check=False)
    return probe.stdout.strip() == "True"


def train() -> int:
    """Run the training workloads; how many ran to the end."""
    done = 0
    for workload in TRAINING:
        cmd = [sys.executable, "-m", "a3m", "bench", *workload, "--no-baselines", "--json"]
        print(f"a3m: training: a3m bench {' '.join(workload)}", flush=True)
        # (its own session: a workload that overruns goes with the processes it spawned)
        proc = subprocess.Popen(cmd, cwd=ROOT, env=_this_tree(), stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, text=True, start_new_session=True)
        try:
            _, err = proc.communicate(timeout=TRAINING_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            print("a3m: training workload timed out (its counts are partial)", file=sys.stderr)
            continue
        if proc.returncode == 0:
            done += 1
        else:
            print(f"a3m: training workload failed:\n{err[-2000:]}", file=sys.stderr)
    return done


def plain(why: str) -> int:
    """A plain build instead (``why``: the reason said first)."""
    print(f"a3m: a plain build of the compiled modules ({why})", file=sys.stderr, flush=True)
    ok = build("")
    print(f"a3m: compiled modules {'built' if ok else 'not built: the sources run'}")
    return 0


def main() -> int:
    marker = Path(COMPILED["PROFILE_MARKER"])
    marker.unlink(missing_ok=True)
    if os.environ.get(PGO_ENV, "") == "0":
        return plain(f"{PGO_ENV}=0")
    if COMPILED["gcc_major"]() < COMPILED["PGO_MIN_GCC"]:
        return plain(f"a profile needs GCC {COMPILED['PGO_MIN_GCC']} or later")
    for gcda in (ROOT / "build").rglob("*.gcda"):  # (counts of an earlier build's code)
        gcda.unlink()
    t0 = time.monotonic()
    if not build("generate"):
        return plain("the instrumented build failed")
    trained = train()
    counted = sum(1 for _ in (ROOT / "build").rglob("*.gcda"))
    if not trained or not counted:  # (a profile of imports alone would lay out nothing)
        return plain("no training workload ran to the end")
    if not build("use"):
        return plain("the profile-guided build failed")
    group = COMPILED["group_library"](str(ROOT / "src"))
    if group:
        stat = os.stat(group)
        marker.write_text(json.dumps({
            "trained": [" ".join(w) for w in TRAINING], "workloads_done": trained,
            "library": os.path.basename(group), "size": stat.st_size,
            "mtime_ns": stat.st_mtime_ns,
        }, indent=1) + "\n")
    print(f"a3m: compiled modules built profile-guided ({trained}/{len(TRAINING)} training "
          f"workloads, {time.monotonic() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
