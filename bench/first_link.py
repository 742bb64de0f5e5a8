"""How long a first secure link and its first message take across a lossy path, over many
seeds of the simulator (virtual time, so the figures do not depend on this machine)::

    .venv/bin/python bench/first_link.py [--seeds 200] [--loss 0.35] [--reorder 0.5] [--clear]

For each seed, two fresh nodes (Exon + core, as a3m.Node) that know each other's address:
the PUSH links to the PULL and sends one message; the time is from the link call to the
message's delivery (handshake, LINK/LINKACK, Exon's slots, the message), and to the
handshake's end (both ends hold the session, the initiator's confirmed). Prints the median,
the 90th and 99th percentiles and the worst seed of each, and the handshake counters summed.
"""

from __future__ import annotations

import argparse
import statistics
from random import Random

from a3m.exon import ExonConfig
from a3m.testing.sim import LinkModel, Network, SimulationError
from a3m.testing.sim_node import NodeHost


def sessions_up(a: NodeHost, b: NodeHost) -> bool:
    """Both ends hold a session with each other, the initiator's confirmed."""
    sa, sb = a.proto.secure, b.proto.secure
    if sa is None or sb is None:
        return True
    s = sa._current.get("b")
    return s is not None and s.confirmed and "a" in sb._current


def first_message_s(seed: int, model: LinkModel, secure: bool
                    ) -> tuple[float, float, dict[str, int]]:
    net = Network(seed, model)
    rng = Random(seed)
    cfg = ExonConfig(secure=secure)
    a, b = NodeHost("a", rng, cfg), NodeHost("b", rng, cfg)
    net.add("a", a)
    net.add("b", b)
    a.proto.associate("b", net.address["b"])
    b.proto.associate("a", net.address["a"])
    pull = b.core.create("PULL", "in")
    push = a.core.create("PUSH", "out")
    got: list[bytes] = []

    def app(host: NodeHost, now: float) -> None:
        msg = pull.try_recv()
        if msg is not None:
            got.append(msg.payload)

    b.app = app
    push.link(("b", "in"), 0.0)
    sent = [False]

    def send_app(host: NodeHost, now: float) -> None:
        if not sent[0] and push.try_send(b"first"):
            sent[0] = True

    a.app = send_app
    net.flush("a")
    net.flush("b")
    net.run_until(lambda: sessions_up(a, b), max_time=120.0, what="handshake")
    t_hs = net.now
    try:
        net.run_until(lambda: bool(got), max_time=120.0, what="first message")
    except SimulationError:
        net.now = float("inf")  # never, within two minutes
    st = a.proto.stats
    counts = {"hello_resends": st.hello_resends, "initiate_resends": st.initiate_resends,
              "handshakes_started": st.handshakes_started}
    return t_hs, net.now, counts


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=200)
    ap.add_argument("--first-seed", type=int, default=1)
    ap.add_argument("--loss", type=float, default=0.35)
    ap.add_argument("--reorder", type=float, default=0.5)
    ap.add_argument("--clear", action="store_true", help="secure=False (the opt-out)")
    args = ap.parse_args()
    model = LinkModel(loss=args.loss, reorder=args.reorder)
    times: list[tuple[float, int]] = []
    handshakes: list[tuple[float, int]] = []
    totals: dict[str, int] = {}
    for seed in range(args.first_seed, args.first_seed + args.seeds):
        t_hs, t, counts = first_message_s(seed, model, not args.clear)
        times.append((t, seed))
        handshakes.append((t_hs, seed))
        for k, v in counts.items():
            totals[k] = totals.get(k, 0) + v
    print(f"{'clear' if args.clear else 'secure'} loss {args.loss} reorder {args.reorder}, "
          f"{len(times)} seeds; {totals}")
    for what, rows in (("handshake", handshakes), ("first message", times)):
        if args.clear and what == "handshake":
            continue
        ts = sorted(t for t, _ in rows)
        worst = max(rows)
        print(f"  {what}: median {statistics.median(ts):.2f} s, p90 {ts[int(0.9 * len(ts))]:.2f}"
              f" s, p99 {ts[min(len(ts) - 1, int(0.99 * len(ts)))]:.2f} s, worst "
              f"{worst[0]:.2f} s (seed {worst[1]})")


if __name__ == "__main__":
    main()
