"""A node's counters for Prometheus (SPEC 7): ``a3m.metrics.Collector(node)``.

A custom collector (``prometheus_client``'s own protocol): nothing is counted twice, every
scrape reads the node's ``stats`` once and turns it into metric families, named
and typed after Prometheus' conventions (``a3m_`` prefix, base units, ``_total`` on
counters, a ``node`` label). ``prometheus_client`` is an optional extra::

    pip install 'a3m[metrics]'

and::

    from prometheus_client import start_http_server
    import a3m, a3m.metrics

    node = a3m.Node("collector")
    a3m.metrics.Collector(node)          # registers with prometheus_client's default registry
    start_http_server(9464)              # http://127.0.0.1:9464/metrics

``a3m collect --metrics-port PORT`` (and the Spark source's ``metricsPort`` option) serve a
collector node's metrics this way.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterator
from typing import Any

#: Exon counters renamed to carry their unit last (the rest keep their ``ExonStats`` name).
_EXON_RENAMED = {"bytes_in": "in_bytes", "bytes_out": "out_bytes"}
#: Help lines for the counters an operator reads first (the others point at ExonStats).
_EXON_HELP = {
    "datagrams_in": "UDP datagrams read", "datagrams_out": "UDP datagrams sent",
    "bytes_in": "bytes read in UDP datagrams", "bytes_out": "bytes sent in UDP datagrams",
    "delivered": "messages delivered by Exon (exactly once)",
    "delivered_bytes": "payload bytes delivered by Exon",
    "retransmits": "tokens sent again", "duplicates": "tokens received again (not delivered)",
    "malformed": "datagrams dropped as malformed", "forged": "datagrams that did not "
    "authenticate", "outcome_unknown": "messages of unknown outcome (a receiver restarted)",
    "peers_unreachable": "peers reported unreachable", "handshakes_completed":
    "handshakes completed as initiator", "handshakes_accepted": "handshakes accepted as "
    "responder", "unauth_shed": "handshake datagrams shed under load",
}
#: The node's own counters: stats key -> (metric name, help).
_NODE_COUNTERS = {
    "malformed": ("a3m_node_malformed_messages", "middleware messages dropped as malformed"),
    "not_found": ("a3m_node_socket_not_found_messages", "messages for no socket here"),
    "dropped_closing": ("a3m_node_dropped_closing_messages",
                        "messages made after the node began closing (refusals, relinks)"),
    "lost_messages": ("a3m_node_lost_messages", "messages the transport reported lost "
                      "(unknown outcome or given up)"),
    "peers_unreachable": ("a3m_node_peers_unreachable", "peers given up as unreachable"),
    "peers_reachable": ("a3m_node_peers_reachable", "unreachable peers heard again"),
    "peers_restarted": ("a3m_node_peers_restarted", "peers found restarted"),
    "io_errors": ("a3m_node_io_errors", "socket errors of the I/O loop"),
    "loop_errors": ("a3m_node_loop_errors", "errors caught in the I/O loop"),
    "event_errors": ("a3m_node_event_errors", "errors of event handlers"),
    "rx_drops": ("a3m_node_rx_dropped_datagrams",
                 "datagrams the kernel dropped (receive buffer full)"),
    "events_dropped": ("a3m_node_events_dropped", "node events dropped unread (oldest)"),
}
#: Gauges of what the node holds (``stats["tables"]``): key -> (metric name, help).
_TABLES = {
    "sockets": ("a3m_node_sockets", "sockets open"),
    "links": ("a3m_node_links", "links, in every state"),
    "cookies": ("a3m_node_cookies", "cookies awaited or unread"),
    "send_records": ("a3m_exon_send_records", "Exon send records"),
    "recv_records": ("a3m_exon_receive_records", "Exon receive records"),
    "sessions": ("a3m_secure_sessions", "secure sessions"),
    "outbox": ("a3m_node_outbox_messages", "messages waiting for Exon's window"),
    "events": ("a3m_node_events_queued", "node events kept unread"),
}


def exon_metric_name(field: str) -> str:
    """The metric family of an ``ExonStats`` counter (``_total`` is added by the client)."""
    return "a3m_exon_" + _EXON_RENAMED.get(field, field)


#: The collector registered on each registry: a second node joins it (one family per
#: metric, a sample per node), since a family may appear only once in a scrape.
_ON: weakref.WeakKeyDictionary[Any, Collector] = weakref.WeakKeyDictionary()


class Collector:
    """The metrics of ``node`` (an :class:`a3m.Node`, or an :class:`a3m.aio.Node`), read
    from its ``stats`` at each scrape; registered with ``registry`` (prometheus_client's
    default registry when None; ``registry=False``: not registered, e.g. to register it
    yourself). Several nodes may share a registry: their samples differ by the ``node``
    label (the first collector there reports them all)."""

    def __init__(self, node: Any, registry: Any = None) -> None:
        try:
            import prometheus_client  # noqa: F401
        except ImportError as exc:  # pragma: no cover - the extra is installed in tests
            raise ImportError("a3m.metrics needs prometheus_client: pip install "
                              "'a3m[metrics]'") from exc
        self.node = node
        self.nodes: list[Any] = [node]
        if registry is None:
            from prometheus_client import REGISTRY

            registry = REGISTRY
        if registry is False:
            return
        first = _ON.get(registry)
        if first is not None:
            first.nodes.append(node)
            self.nodes = first.nodes
            return
        _ON[registry] = self
        registry.register(self)

    def describe(self) -> list[Any]:
        """Nothing up front: the registry then calls :meth:`collect` only at scrapes (a
        closed node would fail its first read at registration)."""
        return []

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        read: list[tuple[list[str], dict[str, Any]]] = []
        for node in list(self.nodes):
            if getattr(getattr(node, "sync", node), "_closed", False):
                continue  # closed: its series end
            try:
                read.append(([str(node.id)], node.stats))
            except Exception:  # a closed node: nothing to say (a scrape never fails for it)
                continue
        if not read:
            return
        for field in read[0][1]["exon"]:
            fam = CounterMetricFamily(exon_metric_name(field),
                                      _EXON_HELP.get(field, f"Exon counter {field} "
                                                     "(a3m.exon ExonStats)"),
                                      labels=["node"])
            for label, stats in read:
                fam.add_metric(label, stats["exon"].get(field, 0))
            yield fam
        for key, (name, doc) in _NODE_COUNTERS.items():
            fam = CounterMetricFamily(name, doc, labels=["node"])
            for label, stats in read:
                if key in stats:
                    fam.add_metric(label, stats[key])
            yield fam
        events = CounterMetricFamily("a3m_node_events", "node events by kind (Node.events)",
                                     labels=["node", "kind"])
        for label, stats in read:
            for kind, count in stats.get("events", {}).items():
                events.add_metric([*label, kind], count)
        yield events
        for key, (name, doc) in _TABLES.items():
            gauge = GaugeMetricFamily(name, doc, labels=["node"])
            for label, stats in read:
                tables = stats.get("tables", {})
                if key in tables:
                    gauge.add_metric(label, tables[key])
            yield gauge


def serve(node: Any, port: int, addr: str = "127.0.0.1") -> Any:
    """Serve ``node``'s metrics over HTTP at ``addr:port`` (``/metrics``) from a thread of
    prometheus_client, on a registry of its own; returns the server (``shutdown()`` it)."""
    from prometheus_client import CollectorRegistry, start_http_server

    registry = CollectorRegistry()
    Collector(node, registry)
    server, _thread = start_http_server(port, addr, registry=registry)
    return server


__all__ = ["Collector", "exon_metric_name", "serve"]
