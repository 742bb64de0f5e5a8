"""A fleet of producers linking at once to one collector that takes time to work (issue 32):
the first exchanges must not turn into a storm that keeps the collector drowning. On the
simulator's clock, with the collector's work priced per datagram (``a3m.testing.fleet``):
the counts (datagrams per producer, key exchanges, queue drops) are the test, never a rate.

Before the first-exchange changes, 200 producers against a collector that reads a datagram
per millisecond never all linked within 120 s: 618 datagrams per producer, 78 765 sent by
the collector, 40 917 dropped at its queue, 1 314 key exchanges for 200 HELLOs."""

from __future__ import annotations

import pytest

from a3m.testing.fleet import fleet_link
from a3m.testing.sim import HostCpu, seed_from_env

#: The collector reads a datagram per millisecond, sends one per half millisecond, and its
#: socket queues 2 000: 200 producers starting together outrun it several times over.
CPU = HostCpu(rx_s=0.001, tx_s=0.0005, queue=2000)


@pytest.mark.parametrize("seed", [1, 2])
def test_a_fleet_links_to_a_busy_collector_without_a_retransmission_storm(seed: int) -> None:
    peers = 200
    got = fleet_link(peers, CPU, until=60.0, seed=seed_from_env(seed))
    assert got["linked"] == peers and got["collector_links"] == peers, got
    prod, col = got["producers"], got["collector"]
    # Per producer: a handshake (HELLO, INITIATE, a few resends), the LINK's slot request
    # and token, the LINKACK's answers and releases: about twenty datagrams, not hundreds.
    assert prod["datagrams_out"] <= 40, got
    assert col["datagrams_out"] <= 40 * peers, got
    assert col["hellos_answered"] == peers, got  # one key exchange each: repeats are cheap
    assert prod["handshakes_started"] <= 1.1, got  # no new handshakes for a slow collector
    assert got["collector_rx_drops"] <= peers, got
