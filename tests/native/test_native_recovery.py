"""The Rust loss recovery and first-probe pacer (``a3m._native.PathRecoveryCore`` and
``FirstProbePacerCore``, over ``native/src/exon/``) against their Python twins
(``a3m.exon.recovery.PathRecovery``, ``a3m.exon.pacer.FirstProbePacer``: the specification),
differentially: both are built with the same arguments and driven with the same long random
sequence of calls, and after every call every slot of the two must be equal exactly (floats
bit for bit: equal, with the same sign of zero, or both NaN; ints and bools equal; the same
types), the calls' results too, and where the Python twin raises the native one raises the
same exception class and leaves the same state.

The sequences are seeded (``random.Random(seed)``): the same calls on every run. Three
families: a sender's (RTT samples 50 us..2 s, time moving on by 1 us..50 ms, sends, ACKs of
0..1e6 bytes, losses, probe timeouts, the pacer, and the sender's own writes of ``inflight``,
``seq``, ``largest_acked``, ``app_limited``, ``mds``, ``pto_count``), the same with byte counts
beyond 2^53 (Python's int/int division and int/float comparison are exact there), and a hostile
one (NaN, infinities, negative and zero arguments, time going back, the private methods called
directly, internal fields written to states the protocol never makes) that reaches every point
where the Python twin raises.

The specification is always the twins' source, loaded from ``a3m/exon/recovery.py`` and
``pacer.py`` by path: where mypyc compiled the package (``a3m.COMPILED``), the compiled twins
are compared too, on the sender's and the pacer's sequences (beyond 2^53 they answer otherwise:
mypyc converts each int to a float before an int / int division or an int-float comparison,
so the two families that go there are the source's alone). With ``A3M_PURE_PYTHON=1`` the
package runs its sources, and the native classes are still those of the built module (``from
a3m import _native`` reads no environment).
"""

from __future__ import annotations

import importlib.util
import marshal
import math
import operator
import os
import random
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import a3m
import a3m.exon
from a3m.exon import pacer as run_pacer
from a3m.exon import recovery as run_recovery

from .twins import native

RecoveryCore: Any = getattr(native, "PathRecoveryCore", None)
PacerCore: Any = getattr(native, "FirstProbePacerCore", None)
if RecoveryCore is None or PacerCore is None:
    pytest.skip("a3m._native was built without PathRecoveryCore / FirstProbePacerCore "
                "(rebuild it: make native)", allow_module_level=True)


def source_module(name: str) -> Any:
    """``a3m/exon/<name>.py`` run from its source, whatever runs in the package (the mypyc
    build, when there is one, answers otherwise beyond 2^53: its int / int and int-float
    comparisons convert each int to a float first). Both modules import nothing of a3m."""
    spec = importlib.util.spec_from_file_location(
        f"a3m_spec_{name}", Path(a3m.exon.__file__).parent / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


#: The specification: the Python twins from their sources.
py_recovery = source_module("recovery")
py_pacer = source_module("pacer")
SLOTS: tuple[str, ...] = py_recovery.PathRecovery.__slots__
PACER_SLOTS: tuple[str, ...] = py_pacer.FirstProbePacer.__slots__
#: The twins the runtime runs: the sources again, or their mypyc build (then compared too,
#: on the sender's and the pacer's sequences).
RUNNING = {"source": (py_recovery, py_pacer), "compiled": (run_recovery, run_pacer)}
both_twins = pytest.mark.parametrize("twin", [
    "source",
    pytest.param("compiled", marks=pytest.mark.skipif(
        not a3m.COMPILED, reason="not compiled: the sources ran as the specification")),
])

#: Sequences of each family and steps in each (a step is one to a few calls or writes):
#: about 160 000 calls and writes compared in the sender's, 21 000 in the huge one, 45 000 in
#: the hostile one, 45 000 in the pacer's (twice each where the compiled twins run too).
SENDER_SEQUENCES, SENDER_CALLS = 240, 400
HUGE_SEQUENCES, HUGE_CALLS = 40, 300
HOSTILE_SEQUENCES, HOSTILE_CALLS = 150, 300
PACER_SEQUENCES, PACER_CALLS = 150, 300


def same(a: Any, b: Any) -> bool:
    """Exactly equal: the same type; floats bit for bit (NaNs alike)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        if math.isnan(a):
            return math.isnan(b)
        return a == b and math.copysign(1.0, a) == math.copysign(1.0, b)
    if isinstance(a, list | tuple):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    return bool(a == b)


class Twins:
    """A Python twin and a native one, driven alike and compared after each call."""

    def __init__(self, py: Any, nat: Any, slots: tuple[str, ...], where: str) -> None:
        self.py, self.nat, self.slots, self.where = py, nat, slots, where
        self.get = operator.attrgetter(*slots)
        self.log: list[tuple[str, tuple[Any, ...]]] = []  # the calls so far (for a failure)
        self.raised: Counter[str] = Counter()
        self.check()

    def fail(self, what: str) -> None:
        tail = "\n  ".join(f"{name}{args!r}" for name, args in self.log[-25:])
        pytest.fail(f"{self.where}: {what}\n  last calls:\n  {tail}")

    def check(self) -> None:
        # The two tuples of fields marshalled (format 2: no back-references; a float's 8
        # bytes, ints and bools by type and value): the same bytes, the same fields, at C
        # speed. Else the fields one by one, exactly (NaNs of other bits alike), to say
        # which differs.
        if marshal.dumps(self.get(self.py), 2) != marshal.dumps(self.get(self.nat), 2):
            for name in self.slots:
                a, b = getattr(self.py, name), getattr(self.nat, name)
                if not same(a, b):
                    self.fail(f"after the last call: {name} python {a!r} native {b!r}")

    def call(self, name: str, *args: Any) -> Any:
        self.log.append((name, args))
        results = []
        for obj in (self.py, self.nat):
            try:
                results.append(("ok", getattr(obj, name)(*args)))
            except Exception as exc:
                results.append(("raise", type(exc)))
        (kp, vp), (kn, vn) = results
        if kp != kn or (kp == "ok" and not same(vp, vn)) or (kp == "raise" and vp is not vn):
            self.fail(f"{name}{args!r}: python {kp} {vp!r}, native {kn} {vn!r}")
        if kp == "raise":
            self.raised[f"{name}:{vp.__name__}"] += 1
        self.check()
        return vp if kp == "ok" else None

    def write(self, name: str, value: Any) -> None:
        """A direct write, as the sender makes (``path.seq = seq``)."""
        self.log.append((f"{name} =", (value,)))
        setattr(self.py, name, value)
        setattr(self.nat, name, value)
        self.check()

    def add(self, name: str, n: int) -> None:
        """``obj.name += n`` on both (read, add, write, as Python does it)."""
        self.log.append((f"{name} +=", (n,)))
        setattr(self.py, name, getattr(self.py, name) + n)
        setattr(self.nat, name, getattr(self.nat, name) + n)
        self.check()


# ------------------------------------------------------------------ the sender's family

MDS = [64, 576, 1200, 1472, 9000, 65000, 1 << 20]
INITIAL_PTO = [0.05, 0.2, 1.0, 3.0]
ACK_DELAY = [0.0, 0.001, 0.025, 0.2]
BACKOFF_CAP = [0.3, 2.0, 60.0, 1e9]


def recovery_twins(rng: random.Random, where: str, spec: Any = py_recovery
                   ) -> tuple[Twins, dict[str, Any]]:
    args = (rng.choice(INITIAL_PTO), rng.choice(ACK_DELAY), rng.choice(BACKOFF_CAP),
            rng.choice(MDS), rng.random() < 0.75)
    twins = Twins(spec.PathRecovery(*args), RecoveryCore(*args), SLOTS,
                  f"{where} PathRecovery{args!r}")
    return twins, {"mds": args[3]}


class Observed:
    """What the sequences made the Python twin do (so that a change of the generator that
    stops reaching a behaviour fails, rather than checking less)."""

    def __init__(self) -> None:
        self.seen: set[str] = set()

    def note(self, path: Any, before: dict[str, Any]) -> None:
        seen = self.seen
        seen.add(f"phase{path.phase}")
        if path.pacing:
            seen.add("pacing")
        if path.pacing_rate:
            seen.add("paced")
        if path.congestion_events > before["congestion_events"]:
            seen.add("congestion")
        if path.bw < before["bw"] and path.pto_count == 0:
            seen.add("bw down")
        if len(path.bw_samples) == py_recovery.BW_WINDOW_ROUNDS:
            seen.add("bw window full")
        if path.pace_owed_s > 0:
            seen.add("catching up")
        if path.reorder_quarters < before["reorder_quarters"]:
            seen.add("threshold narrowed")
        if path.extra_acked > 0 and path.extra_acked == float(path.cwnd):
            seen.add("extra clamped")
        if path.cwnd_tokens:
            seen.add("window measured")
        if path.pto > path.base_pto():
            seen.add("backed off")
        if path.pto == path.backoff_cap:
            seen.add("capped")


def drive_sender(seed: int, calls: int, huge: bool, observed: Observed,
                 spec: Any = py_recovery) -> Twins:
    """A sender's life on one path: sends, ACKs, losses, samples, timeouts, the pacer."""
    rng = random.Random(seed)
    twins, info = recovery_twins(rng, f"{'huge' if huge else 'sender'} seed {seed}", spec)
    py = twins.py
    mds = info["mds"]
    rtt = math.exp(rng.uniform(math.log(50e-6), math.log(1.5)))  # the path's round trip
    jitter = rng.choice([0.0, 0.05, 0.5, 2.0])
    loss = rng.choice([0.0, 0.02, 0.1, 0.4])
    step = rng.choice([1e-4, 2e-3, 5e-2])
    scale = (1 << 53) if huge else 1  # byte counts beyond 2^53: exact int arithmetic

    def nbytes(most: int) -> int:
        n = rng.randint(20, max(20, most))
        return n + scale if huge else n

    now = rng.uniform(0.0, 1000.0)
    for _ in range(calls):
        now += rng.uniform(1e-6, step)
        before = {k: getattr(py, k) for k in ("congestion_events", "bw", "reorder_quarters")}
        op = rng.random()
        if op < 0.22:  # send new tokens (the sender's hot path, then the pacer's bill)
            n = nbytes(mds + 40)
            twins.add("seq", 1)
            twins.add("inflight", n)
            if py.pacing_rate or rng.random() < 0.1:
                twins.call("paced", n, now)
            if rng.random() < 0.3:
                twins.write("app_limited", True)
        elif op < 0.34:
            unit = rng.randint(1, mds + 40) + (scale if huge and rng.random() < 0.5 else 0)
            if not twins.call("pace_allowance", now, unit) and rng.random() < 0.7:
                twins.call("pace_wake")
        elif op < 0.56:  # an ACK
            if rng.random() < 0.6:
                twins.call("on_progress")
            most = min(py.inflight, 1_000_000) if rng.random() < 0.8 else 1_000_000
            n = 0 if rng.random() < 0.02 else nbytes(most) if most >= 20 else rng.randint(
                0, 1_000_000)
            args: tuple[Any, ...] = (n, now, rng.randint(1, 64))
            twins.call("on_acked", *(args if rng.random() < 0.9 else args[:2]))
            if rng.random() < 0.3:
                twins.write("largest_acked", py.seq - rng.randint(0, 5))
        elif op < 0.70:
            sample = rtt * (1 + jitter * rng.random())
            twins.call("on_rtt_sample", min(2.0, max(50e-6, sample)))
        elif op < 0.76:
            if rng.random() < loss * 2:
                twins.call("on_lost", nbytes(mds + 40))
        elif op < 0.80:
            twins.call("on_pto")
        elif op < 0.82:
            twins.call("on_spurious")
        elif op < 0.83:
            twins.call("on_reordering")
        elif op < 0.85:
            twins.call("set_peer_ack_delay", rng.choice(ACK_DELAY))
        elif op < 0.87:
            twins.call("seed_pto", rng.uniform(-0.1, 2.0))
        elif op < 0.875:
            twins.call("set_loaded")
        elif op < 0.89:
            twins.call("on_removed_bytes", nbytes(2 * mds))
        elif op < 0.95:
            twins.call(rng.choice(["base_pto", "loss_delay", "snapshot"]))
        elif op < 0.96:  # a new send record on the path (sender._path)
            mds = rng.choice(MDS)
            twins.write("mds", mds)
            twins.write("inflight", 0)
            twins.write("largest_acked", py.seq)
            twins.write("pto_count", 0)
        else:
            for _ in range(rng.randint(1, 4)):  # losses come in runs
                twins.call("on_lost", nbytes(mds + 40))
        observed.note(py, before)
    return twins


@both_twins
def test_sender_sequences(twin: str) -> None:
    observed = Observed()
    raised: Counter[str] = Counter()
    for seed in range(SENDER_SEQUENCES):
        raised += drive_sender(seed, SENDER_CALLS, False, observed, RUNNING[twin][0]).raised
    want = {"phase0", "phase1", "phase2", "pacing", "paced", "congestion", "bw down",
            "bw window full", "catching up", "threshold narrowed", "extra clamped",
            "window measured", "backed off", "capped"}
    assert want <= observed.seen, f"never reached: {sorted(want - observed.seen)}"
    # The only raise a sender's values reach: a round of 0-byte acknowledgements (0 / 0).
    assert set(raised) <= {"on_acked:ZeroDivisionError"}, raised


def test_huge_byte_counts() -> None:
    """Byte counts of 2^53 and more: int / int and int-float comparisons, exact in Python,
    exact in Rust (a conversion of each int to a float first would round twice)."""
    observed = Observed()
    for seed in range(HUGE_SEQUENCES):
        drive_sender(10_000 + seed, HUGE_CALLS, True, observed)
    assert {"window measured", "congestion"} <= observed.seen


# ------------------------------------------------------------------ the hostile family

WEIRD_FLOATS = [0.0, -0.0, -1.0, 1e-300, 5e-324, math.inf, -math.inf, math.nan, 1e-9, 100.0]


def hostile_float(rng: random.Random, usual: Callable[[], float]) -> float:
    return rng.choice(WEIRD_FLOATS) if rng.random() < 0.15 else usual()


def drive_hostile(seed: int, calls: int) -> Twins:
    rng = random.Random(seed)
    twins, _ = recovery_twins(rng, f"hostile seed {seed}")
    now = 10.0

    def when() -> float:
        return hostile_float(rng, lambda: now)

    def size() -> int:
        # (bounded: Python's ints grow past 2^63 where the Rust ones saturate)
        return rng.choice([0, 0, -1, -1400, rng.randint(-5000, 5000), rng.randint(0, 1 << 32)])

    for _ in range(calls):
        now += rng.choice([-0.5, 0.0, 1e-6, 1e-3, 0.02, 0.3]) * rng.random()
        op = rng.randrange(22)
        if op == 0:
            twins.call("on_rtt_sample", hostile_float(rng, lambda: rng.uniform(0.0, 100.0)))
        elif op == 1:
            twins.call("on_acked", size(), when(), rng.choice([0, 1, 1, 3, -2, 64]))
        elif op == 2:
            twins.call("on_lost", size())
        elif op == 3:
            twins.call("on_pto")
        elif op == 4:
            twins.call("on_progress")
        elif op == 5:
            twins.call("pace_allowance", when(), rng.choice([0, 1, -3, 1472, 1 << 40]))
        elif op == 6:
            twins.call("paced", size(), when())
        elif op == 7:
            twins.call("pace_wake")
        elif op == 8:
            # (no vanishing span: a rate near the float range's end makes windows beyond
            # 2^63, where Python's ints grow and the Rust ones saturate)
            span = rng.choice([0.0, -0.0, -1.0, math.inf, -math.inf, math.nan,
                               rng.uniform(0.001, 0.5)])
            twins.call("_end_round", span, when())
        elif op == 9:
            twins.call("_next_phase", rng.random() < 0.5, rng.random() < 0.5)
        elif op == 10:
            twins.call("_set_pacing_rate")
        elif op == 11:
            twins.call("_update_pto")
        elif op == 12:
            twins.call("seed_pto", hostile_float(rng, rng.random))
        elif op == 13:
            twins.call("set_peer_ack_delay", hostile_float(rng, rng.random))
        elif op == 14:
            twins.call(rng.choice(["set_loaded", "on_spurious", "on_reordering"]))
        elif op == 15:
            twins.call("on_removed_bytes", size())
        elif op == 16:
            twins.call(rng.choice(["base_pto", "loss_delay", "snapshot"]))
        elif op == 17:  # internal states the protocol never makes
            name, value = rng.choice([
                ("pto_count", rng.randint(-3, 20)), ("cycle", rng.randint(-10, 10)),
                ("phase", rng.randint(0, 3)), ("srtt", rng.choice([0.0, -0.0, 0.01])),
                ("token_bytes", rng.choice([0.0, 0.5, 64.0])), ("pacing", True),
                ("reorder_quarters", rng.randint(-2, 14)), ("bw_samples", []),
                ("min_rtt", rng.choice([math.inf, 0.0, 0.004])), ("bw", rng.random() * 1e6),
            ])
            twins.write(name, value)
        elif op == 18:
            twins.add("inflight", size())
        elif op == 19:
            twins.write("app_limited", rng.random() < 0.5)
        else:
            twins.call("on_rtt_sample", rng.uniform(0.001, 0.2))
    return twins


def test_hostile_sequences() -> None:
    raised: Counter[str] = Counter()
    for seed in range(HOSTILE_SEQUENCES):
        raised += drive_hostile(20_000 + seed, HOSTILE_CALLS).raised
    # Every place the Python twin raises was reached, and the native twin raised alike.
    want = {"on_acked:ZeroDivisionError", "_end_round:ZeroDivisionError",
            "pace_allowance:ZeroDivisionError", "_update_pto:ValueError",
            "_set_pacing_rate:ZeroDivisionError", "_set_pacing_rate:IndexError"}
    assert want <= set(raised), f"never raised: {sorted(want - set(raised))} ({raised})"


# ------------------------------------------------------------------ single behaviours

def test_constructor_and_defaults() -> None:
    for mds in [1, 64, 1472, 3680, 9000, 1 << 20, 1 << 40]:
        for pacing in (True, False):
            Twins(py_recovery.PathRecovery(0.2, 0.025, 60.0, mds, pacing),
                  RecoveryCore(0.2, 0.025, 60.0, mds, pacing), SLOTS, f"mds {mds}")
    Twins(py_recovery.PathRecovery(0.2, 0.025, 60.0, 1472),
          RecoveryCore(0.2, 0.025, 60.0, 1472), SLOTS, "pacing default")
    Twins(py_pacer.FirstProbePacer(), PacerCore(), PACER_SLOTS, "pacer defaults")
    assert set(RecoveryCore.FIELDS) == set(SLOTS) and list(RecoveryCore.FIELDS) == list(SLOTS)
    assert list(PacerCore.FIELDS) == list(PACER_SLOTS)


def test_every_method_is_there() -> None:
    """The native classes answer every method of the Python ones (public and private)."""
    for py_cls, nat_cls in ((py_recovery.PathRecovery, RecoveryCore),
                            (py_pacer.FirstProbePacer, PacerCore)):
        methods = {name for name, v in vars(py_cls).items()
                   if callable(v) and not name.startswith("__")}
        assert methods, py_cls
        assert not {m for m in methods if not hasattr(nat_cls, m)}, nat_cls


def test_keyword_arguments() -> None:
    twins, _ = recovery_twins(random.Random(1), "keywords")
    for obj in (twins.py, twins.nat):
        obj.on_rtt_sample(sample=0.03)
        obj.on_acked(nbytes=3000, now=1.0)
        obj.on_acked(nbytes=3000, now=1.5, ntokens=2)
        obj.pace_allowance(now=1.6, unit=1400)
        obj.paced(nbytes=1400, now=1.6)
    twins.check()


def test_int_float_comparisons_beyond_2_53() -> None:
    """Where an int and a float compare, Python compares exactly; converting the int to a
    float first (it rounds beyond 2^53) would answer otherwise in each of these."""
    def fresh() -> Twins:
        return Twins(py_recovery.PathRecovery(0.2, 0.025, 60.0, 1472),
                     RecoveryCore(0.2, 0.025, 60.0, 1472), SLOTS, "2^53")

    # Drain ends once inflight <= bw x min_rtt: 2^53 + 1 > 2^53 (as floats: equal).
    twins = fresh()
    for name, value in [("phase", py_recovery.DRAIN), ("inflight", 2**53 + 1),
                        ("bw", 2.0**53), ("min_rtt", 1.0)]:
        twins.write(name, value)
    twins.call("_next_phase", False, False)
    assert twins.py.phase == py_recovery.DRAIN
    # The pacer's credit of 2^53 bytes holds no datagram of 2^53 + 1.
    twins = fresh()
    for name, value in [("pacing_rate", 2.0**53), ("pace_burst_s", 1.0), ("pace_at", 0.0)]:
        twins.write(name, value)
    assert twins.call("pace_allowance", 1.0, 2**53 + 1) == 0.0
    # Heavy loss: lost > 0.15 x (lost + acked), by one byte, where the product rounds to
    # lost's own float.
    twins = fresh()
    total = 10 * 2**55
    lost = int(py_recovery.LOSS_TOLERANCE * total) + 1
    assert float(lost) == py_recovery.LOSS_TOLERANCE * total
    for name, value in [("pacing", False), ("loss_rate", 0.5), ("round_lost", lost),
                        ("round_acked", total - lost), ("bw", 1000.0), ("min_rtt", 0.01)]:
        twins.write(name, value)
    twins.call("_end_round", 0.5, 3.0)
    assert twins.py.congestion_events == 1


def test_the_python_twin_runs_from_source_when_asked() -> None:
    if os.environ.get("A3M_PURE_PYTHON", "") in ("", "0"):
        pytest.skip("A3M_PURE_PYTHON is not set")
    assert run_recovery.__file__.endswith(".py") and run_pacer.__file__.endswith(".py")


# ------------------------------------------------------------------ the pacer

def drive_pacer(seed: int, calls: int, spec: Any = py_pacer) -> Twins:
    rng = random.Random(seed)
    args = (rng.choice([0.0, -5.0, 1.0, 200.0, 256.0, 1000.0, 1e6, math.nan, math.inf]),
            rng.choice([0.0, 0.1, 0.125, 1.0]))
    twins = Twins(spec.FirstProbePacer(*args), PacerCore(*args), PACER_SLOTS,
                  f"pacer seed {seed} FirstProbePacer{args!r}")
    now = rng.uniform(-1.0, 100.0)
    held: list[float] = [0.0]
    for _ in range(calls):
        if rng.random() < 0.5:
            now += rng.choice([0.0, 1e-5, 1e-3, 0.01, 0.2]) * rng.random()
        if rng.random() < 0.02:
            now = rng.choice([math.nan, math.inf, now - 1.0, now])
        if rng.random() < 0.4:
            t = twins.call("slot", now)
        else:
            reserved = rng.choice(held) if rng.random() < 0.8 else rng.uniform(now - 1, now + 1)
            t = twins.call("admit", reserved, now, rng.choice([0.0, 0.005, 0.2, 1.0]))
        if t:
            held.append(t)
        if math.isnan(now) or math.isinf(now):
            now = rng.uniform(0.0, 100.0)
    return twins


@both_twins
def test_pacer_sequences(twin: str) -> None:
    deferred = 0
    for seed in range(PACER_SEQUENCES):
        deferred += drive_pacer(30_000 + seed, PACER_CALLS, RUNNING[twin][1]).py.deferred
    assert deferred > 0
