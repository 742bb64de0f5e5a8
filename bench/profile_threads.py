"""Summarise a py-spy raw profile per process and thread: where each thread's samples went.

Record a benchmark with every process and idle samples included, then summarise::

    py-spy record --subprocesses --idle -r 400 -f raw -o /tmp/prof.txt -- \\
        .venv/bin/a3m bench transport --size 64 --messages 1000000 --no-baselines --json
    .venv/bin/python bench/profile_threads.py /tmp/prof.txt

Threads are told apart by their stacks: ``io`` (the driver's I/O thread), ``app`` (the main
thread of a benchmark process). ``self`` lines are leaf frames (file:line), ``incl`` lines
functions anywhere on the stack. Waiting shows as ``Condition.wait`` (an application thread
blocked on a full window or an empty inbox) and the driver's ``select`` line (the I/O thread
idle).
"""

from __future__ import annotations

import argparse
from collections import Counter, defaultdict

ROLES = {"exon_sender": "sender", "exon_receiver": "receiver", "push_sender": "sender",
         "pull_receiver": "receiver", "a3m_server": "receiver", "a3m_client": "sender"}


def classify(frames: list[str]) -> tuple[str, str] | None:
    """(role, thread) for a benchmark process stack, None for the parent and helpers."""
    names = [f.split(" (")[0] for f in frames]
    role = next((ROLES[n] for n in names if n in ROLES), None)
    if any(n == "Driver._run" for n in names):
        thread = "io"
    elif role is not None and "Thread._bootstrap" not in names:
        thread = "app"
    else:
        return None
    proc = frames[1].split(":")[0] if len(frames) > 1 else "?"
    return f"{role or 'node'} {proc}", thread


def summarise(path: str, top: int) -> None:
    totals: Counter[tuple[str, str]] = Counter()
    leaves: dict[tuple[str, str], Counter[str]] = defaultdict(Counter)
    inclusive: dict[tuple[str, str], Counter[str]] = defaultdict(Counter)
    roles: dict[str, str] = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            stack, _, count = line.rstrip("\n").rpartition(" ")
            if not count.isdigit():
                continue
            n = int(count)
            frames = stack.split(";")
            key = classify(frames)
            if key is None:
                continue
            role, proc = key[0].split(" ", 1)
            if role != "node":
                roles[proc] = role
            totals[key] += n
            leaves[key][frames[-1]] += n
            names = [fr.split(" (")[0] for fr in frames]
            anchor = next(i for i, nm in enumerate(names) if nm == "Driver._run" or nm in ROLES)
            for name in set(names[anchor + 1:]):  # below the thread's entry point
                inclusive[key][name] += n
    for key, total in sorted(totals.items()):
        label, thread = key
        proc = label.split(" ", 1)[1]
        print(f"== {roles.get(proc, 'node')} {proc} thread {thread}: {total} samples")
        for frame, n in leaves[key].most_common(top):
            print(f"   self {100 * n / total:5.1f}%  {frame}")
        for name, n in inclusive[key].most_common(top):
            print(f"   incl {100 * n / total:5.1f}%  {name}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("profile", help="py-spy raw output (-f raw)")
    p.add_argument("--top", type=int, default=12)
    args = p.parse_args()
    summarise(args.profile, args.top)


if __name__ == "__main__":
    main()
