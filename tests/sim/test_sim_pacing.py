"""A stream through a bottleneck with a shallow queue (simulated, virtual time): 10 ms RTT,
100 Mbit/s each way, a tail-drop queue of 2 ms of transmission (a fifth of the path's
bandwidth-delay product), as the TUN emulator's ``queue`` loss model.

Unpaced, every window left in one burst, up to twice the bandwidth-delay product, into a
queue that holds a fifth of one: about half the datagrams were dropped and the stream kept
half the bottleneck's rate (docs/performance.md, "Streams under every loss model": 36 % of
the datagrams and 0.47-0.55 of the clean rate on the emulator). Paced (BBR's pacing rate,
the window a cap) the queue stays short. Counted: queue drops, not times."""

from __future__ import annotations

from random import Random

from a3m.exon import ExonConfig
from a3m.testing.sim import LinkModel, Network
from a3m.testing.sim_node import NodeHost

from .stream import push_pull

RTT_S = 0.010
RATE = 12_500_000.0  # bytes/s: 100 Mbit/s
N = 60_000


def stream(queue_s: float, pacing: bool = True, loss: float = 0.0,
           seed: int = 5) -> tuple[Network, NodeHost, float]:
    """N messages of 64 B a -> b; checks exactly once, in order. Returns the network, the
    sender and the stream's virtual duration (first send to last delivery)."""
    net = Network(seed, LinkModel(loss=loss, delay_s=RTT_S / 2, jitter_s=0.0,
                                  rate_bytes_s=RATE, queue_s=queue_s))
    cfg = ExonConfig(loopback_datagram_size=0, pacing=pacing)
    st = push_pull(net, Random(seed), cfg, N)
    return net, st.hosts["a"], net.now - st.first_sent


def test_a_paced_stream_loses_few_datagrams_to_a_shallow_queue() -> None:
    net, a, took = stream(queue_s=0.002)
    sent = a.proto.stats.datagrams_out
    drops = net.stats.queue_drops
    # Unpaced: 5 824 of 9 017 datagrams dropped (65 %), 0.82 s. Paced: 379 of 3 578 (11 %),
    # nearly all in startup's last two rounds (its probe for the path's rate, at 2.89x, the
    # round the rate estimate reaches the bottleneck's), 0.43 s, against 0.42 s through a
    # deep queue.
    assert drops < 0.15 * sent, (drops, sent, a.proto.path_stats("b"))
    _, _, deep = stream(queue_s=1.0)  # the same bottleneck, a queue that drops nothing
    assert took < 1.2 * deep, (took, deep)


def test_unpaced_the_same_stream_loses_half_its_datagrams() -> None:
    """What the test above guards against (and that its path does stress the queue)."""
    net, a, took = stream(queue_s=0.002, pacing=False)
    assert net.stats.queue_drops > 0.4 * a.proto.stats.datagrams_out
    _, _, deep = stream(queue_s=1.0, pacing=False)
    assert took > 1.5 * deep, (took, deep)


def test_five_percent_loss_at_a_shallow_queue_keeps_most_of_the_rate() -> None:
    """Random loss on top: the pacer's estimate holds (its best rate of 10 rounds), and the
    losses are not taken for congestion. Paced: 72 queue drops of 3 437 datagrams, 0.50 s
    against 0.42 s clean; unpaced: 4 049 of 7 623, 0.83 s."""
    net, a, took = stream(queue_s=0.002, loss=0.05)
    _, _, clean = stream(queue_s=1.0)
    assert net.stats.queue_drops < 0.1 * a.proto.stats.datagrams_out
    assert took < 1.5 * clean, (took, clean)
