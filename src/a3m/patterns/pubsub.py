"""PUB / SUB with topic-prefix subscriptions and synchronised publishing.

A SUB's subscriptions travel in its link metadata (so a publisher knows them from the first
message: no "slow joiner") and afterwards as SUBSCRIBE / UNSUBSCRIBE control messages on every
link. A PUB sends each message once to every link with a matching prefix (overlapping
subscriptions still give one copy) and only when all of them have a credit: the slowest
subscriber sets the pace, nothing is dropped.
"""

from __future__ import annotations

from collections import deque
from random import Random
from typing import Any

from mypy_extensions import mypyc_attr

from a3m.core.link import Link
from a3m.core.message import Metadata
from a3m.core.node_core import NodeCore
from a3m.core.socket_core import Received, SocketCore
from a3m.errors import UsageError
from a3m.patterns.framing import (
    Unwrapping,
    decode_names,
    encode_names,
    send_to_all,
    split_topic,
    with_topic,
)

SUBSCRIBE = 0x40
UNSUBSCRIBE = 0x41
SUBS_RESET = 0x42  # the whole subscription set, replacing the publisher's view


def _matches(topic: bytes, subs: set[bytes]) -> bool:
    for s in subs:  # noqa: SIM110 (any() over a generator costs twice as much per message)
        if topic.startswith(s):
            return True
    return False


#: Topics whose target links a PUB remembers (the cache is cleared when links or
#: subscriptions change; past this many distinct topics, targets are computed each time).
TARGET_CACHE = 1024


@mypyc_attr(allow_interpreted_subclasses=True)
class Pub(SocketCore):
    send_keywords = frozenset({"topic"})
    kind = "PUB"
    peers = frozenset({"SUB", "XSUB"})
    receives = False

    def __init__(self, node: NodeCore, tag: str, rng: Random | None = None,
                 **options: Any) -> None:
        super().__init__(node, tag, rng, **options)
        self._target_cache: dict[bytes, list[Link]] = {}  # topic -> links that want it

    def on_link_added(self, link: Link) -> None:
        raw = (link.peer_meta or {}).get("subs", b"")
        link.attrs["subs"] = decode_names(raw if isinstance(raw, bytes) else b"")
        self._target_cache.clear()

    def on_link_removed(self, link: Link) -> None:
        self._target_cache.clear()

    def on_control(self, link: Link, mtype: int, payload: bytes) -> None:
        subs: set[bytes] = link.attrs.setdefault("subs", set())  # type: ignore[assignment]
        if mtype == SUBSCRIBE:
            subs.add(payload)
        elif mtype == UNSUBSCRIBE:
            subs.discard(payload)
        elif mtype == SUBS_RESET:
            link.attrs["subs"] = decode_names(payload)
        else:
            super().on_control(link, mtype, payload)
            return
        self._target_cache.clear()

    def _targets(self, topic: bytes) -> list[Link]:
        targets = self._target_cache.get(topic)
        if targets is None:
            targets = [lk for lk in self.established_links()
                       if _matches(topic, lk.attrs.get("subs", set()))]  # type: ignore[arg-type]
            if len(self._target_cache) < TARGET_CACHE:
                self._target_cache[topic] = targets
        return targets

    def pattern_send(self, payload: bytes, topic: bytes | str = b"", **kw: Any) -> bool:
        t = topic if type(topic) is bytes else (
            topic.encode() if isinstance(topic, str) else bytes(topic))
        return send_to_all(self, self._targets(t), with_topic(t, payload))

    def pattern_can_send(self) -> bool:
        return all(lk.can_send for lk in self.established_links())


@mypyc_attr(allow_interpreted_subclasses=True)
class Sub(Unwrapping):
    kind = "SUB"
    peers = frozenset({"PUB", "XPUB"})
    sends = False

    def __init__(self, node: NodeCore, tag: str, rng: Random | None = None,
                 **options: Any) -> None:
        self.subscriptions: set[bytes] = set()
        super().__init__(node, tag, rng, **options)

    def link_metadata(self) -> Metadata:
        return {"subs": encode_names(self.subscriptions)}

    def subscribe(self, topic: bytes | str) -> None:
        t = topic.encode() if isinstance(topic, str) else bytes(topic)
        if t in self.subscriptions:
            return
        self.subscriptions.add(t)
        for lk in self.established_links():
            self.send_on(lk, t, SUBSCRIBE)

    def unsubscribe(self, topic: bytes | str) -> None:
        t = topic.encode() if isinstance(topic, str) else bytes(topic)
        if t not in self.subscriptions:
            raise UsageError(f"not subscribed to {t!r}")
        self.subscriptions.discard(t)
        for lk in self.established_links():
            self.send_on(lk, t, UNSUBSCRIBE)

    def on_link_added(self, link: Link) -> None:
        # The metadata may predate changes made while the handshake ran: replace the
        # publisher's view with the current set.
        self.send_on(link, encode_names(self.subscriptions), SUBS_RESET)

    def unwrap(self, payload: bytes, source: tuple[str, str]) -> Received | None:
        framed = split_topic(payload)
        if framed is None:
            return None
        topic, body = framed
        if _matches(topic, self.subscriptions):  # unsubscribed while it was in flight
            return Received(body, source, topic)
        return None


# ---------------------------------------------------------------------------- forwarding

SUB_ON = b"\x01"  # XPUB recv / XSUB send: b"\x01" + topic subscribes, b"\x00" + topic ends it
SUB_OFF = b"\x00"


@mypyc_attr(allow_interpreted_subclasses=True)
class XPub(Pub):
    """A PUB that also tells the application which topics its subscribers want, as
    ``recv()`` messages: ``b"\x01" + topic`` when the first link subscribes to a topic,
    ``b"\x00" + topic`` when the last one leaves it (links that go away count). A forwarder
    sends them to its XSUB, so publishers upstream only send what someone downstream wants."""

    kind = "XPUB"
    receives = True

    def __init__(self, node: NodeCore, tag: str, rng: Random | None = None,
                 **options: Any) -> None:
        super().__init__(node, tag, rng, **options)
        self._wanted: dict[bytes, int] = {}  # topic -> links subscribed to it
        self._events: deque[Received] = deque()
        self._counted: dict[int, set[bytes]] = {}  # id(link) -> the topics counted for it

    def _recount(self, link: Link, subs: set[bytes]) -> None:
        old = self._counted.pop(id(link), set())
        if subs:
            self._counted[id(link)] = set(subs)
        for t in old - subs:
            self._wanted[t] -= 1
            if not self._wanted[t]:
                del self._wanted[t]
                self._events.append(Received(SUB_OFF + t, link.peer))
        for t in subs - old:
            n = self._wanted.get(t, 0)
            self._wanted[t] = n + 1
            if not n:
                self._events.append(Received(SUB_ON + t, link.peer))

    def on_link_added(self, link: Link) -> None:
        super().on_link_added(link)
        self._recount(link, link.attrs["subs"])  # type: ignore[arg-type]

    def on_link_removed(self, link: Link) -> None:
        super().on_link_removed(link)
        self._recount(link, set())

    def on_control(self, link: Link, mtype: int, payload: bytes) -> None:
        super().on_control(link, mtype, payload)
        if link.established:  # changes of a link that is going away were counted out
            self._recount(link, link.attrs.get("subs", set()))  # type: ignore[arg-type]

    def choose_recv(self) -> Received | None:
        return self._events.popleft() if self._events else None

    @property
    def readable(self) -> bool:
        return bool(self._events)


@mypyc_attr(allow_interpreted_subclasses=True)
class XSub(Sub):
    """A SUB whose subscriptions can also be sent: ``send(b"\x01" + topic)`` subscribes,
    ``send(b"\x00" + topic)`` unsubscribes (what an XPUB receives, so a forwarder passes
    them on as they come)."""

    kind = "XSUB"
    sends = True

    def pattern_send(self, payload: bytes, **kw: Any) -> bool:
        head, topic = payload[:1], payload[1:]
        if head == SUB_ON:
            self.subscribe(topic)
        elif head == SUB_OFF:
            if topic in self.subscriptions:
                self.unsubscribe(topic)
        else:
            raise UsageError("an XSUB sends subscriptions: b'\\x01' + topic or b'\\x00' + topic")
        return True

    def pattern_can_send(self) -> bool:
        return True
