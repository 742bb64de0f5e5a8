"""A fleet linking to one collector that takes time to work, in virtual time (so the counts do
not depend on this machine)::

    .venv/bin/python bench/fleet_link.py [--peers 300] [--rx-us 1000] [--tx-us 500]
        [--queue 2000] [--until 60] [--seed 1] [--node-option NAME=VALUE]

``a3m.testing.fleet.fleet_link``: N producer nodes each link a PUSH to one collector's PULL
at the same moment, on a clean network; each datagram the collector reads costs ``--rx-us``
of its time and each it sends ``--tx-us``, and what arrives while it works waits in a socket
queue of ``--queue`` datagrams (beyond, dropped). Prints when every link was up, the
datagrams each side sent (per producer), the collector's queue drops and the retransmission
counters summed over the producers and of the collector, as JSON.
"""

from __future__ import annotations

import argparse
import json

from a3m.exon import ExonConfig
from a3m.testing.fleet import fleet_link
from a3m.testing.sim import HostCpu


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--peers", type=int, default=300)
    ap.add_argument("--rx-us", type=float, default=1000.0)
    ap.add_argument("--tx-us", type=float, default=500.0)
    ap.add_argument("--queue", type=int, default=2000)
    ap.add_argument("--until", type=float, default=60.0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--messages", type=int, default=0,
                    help="then a fan-in: each producer sends this many at once")
    ap.add_argument("--node-option", action="append", default=[], metavar="NAME=VALUE")
    args = ap.parse_args()
    options = {}
    for item in args.node_option:
        k, _, v = item.partition("=")
        options[k] = json.loads(v)
    cpu = HostCpu(args.rx_us / 1e6, args.tx_us / 1e6, args.queue)
    out = fleet_link(args.peers, cpu, args.until, args.seed,
                     ExonConfig.from_options(options) if options else None, args.messages)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
