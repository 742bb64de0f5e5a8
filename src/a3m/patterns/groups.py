"""Socket groups: a RADIO sends to a named group, each DISH joins the groups it wants.

Membership travels over ordinary links, so it is exactly once and in order like any message,
and comes back by itself after a partition (the links are linked again):

- every node has a hidden **directory** socket (tag ``a3m.groups``) that tells the RADIOs
  linked to it which DISH sockets the node has (the whole list in its link metadata and again
  once linked, then each DISH created or closed);
- a RADIO links to the directory of its own node and of every node its node knows of
  (:meth:`NodeCore.watch_nodes`: associations, discovery, nodes heard from), and from there to
  every DISH they list: no ``link()`` per member;
- a DISH's groups travel in its link metadata and then as JOIN / LEAVE on each link, as a
  SUB's subscriptions do.

A send reaches the **view at send time**: the DISHes whose link to this RADIO is established
and whose last JOIN/LEAVE received before the send puts them in the group. ``ALL`` sends one
copy to each of them, over each member's own link and credits (per-member FIFO; all members
must have a credit: the slowest sets the pace). ``ONE`` sends to exactly one, round robin
over the members that have a credit. A group without members blocks the send (or raises
:class:`~a3m.errors.NoMembers` with the option ``no_members="error"``).

What a member leaving does to messages already sent: they are delivered (a DISH that left a
group still gets what was sent to it while the RADIO's view had it; a closing DISH unlinks
with the usual delivery goal). A member whose node dies with messages unacknowledged ends its
link: those messages have an unknown outcome, counted by the node (``lost_messages``) and by
the RADIO (``stats["members_lost"]``); they are never sent again to another member.

More strategies plug in as they do for a user's socket kind: subclass :class:`Radio` and add
to :attr:`Radio.strategies` a function ``(radio, members, framed payload) -> bool``.
"""

from __future__ import annotations

from collections.abc import Callable
from random import Random
from typing import Any, ClassVar, cast

from mypy_extensions import mypyc_attr

from a3m.core.link import Link
from a3m.core.message import Metadata
from a3m.core.node_core import NodeCore
from a3m.core.socket_core import Received, SocketCore
from a3m.errors import NoMembers, UsageError
from a3m.patterns.framing import (
    Unwrapping,
    decode_names,
    encode_names,
    send_to_all,
    split_topic,
    with_topic,
)

#: The directory socket's tag on every node with a DISH.
DIRECTORY_TAG = "a3m.groups"

ALL = "ALL"
ONE = "ONE"

# Directory -> RADIO
DISHES = 0x40  # the node's DISH tags, replacing what the RADIO knew of that node
DISH_ADD = 0x41
DISH_DEL = 0x42
# DISH -> RADIO
JOIN = 0x40
LEAVE = 0x41
GROUPS_RESET = 0x42

MAX_GROUP_BYTES = 255


def group_bytes(group: bytes | str) -> bytes:
    g = group.encode() if isinstance(group, str) else bytes(group)
    if not g or len(g) > MAX_GROUP_BYTES:
        raise UsageError(f"a group name is 1 to {MAX_GROUP_BYTES} bytes: {group!r}")
    return g


@mypyc_attr(allow_interpreted_subclasses=True)
class GroupDirectory(SocketCore):
    """The hidden socket that lists a node's DISH sockets to RADIOs (one per node)."""

    kind = "GROUPDIR"
    peers = frozenset({"RADIO"})
    sends = False
    receives = False

    def __init__(self, node: NodeCore, tag: str, rng: Random | None = None,
                 **options: Any) -> None:
        super().__init__(node, tag, rng, **options)
        self.dishes: set[bytes] = set()

    @classmethod
    def of(cls, node: Any) -> GroupDirectory:
        """The node's directory, created on first use."""
        sock = node.sockets.get(DIRECTORY_TAG)
        if sock is None:
            sock = node.create(cls, DIRECTORY_TAG)
        if not isinstance(sock, GroupDirectory):
            raise UsageError(f"the tag {DIRECTORY_TAG!r} is reserved for socket groups")
        return sock

    def dish_added(self, tag: str) -> None:
        t = tag.encode()
        if t not in self.dishes:
            self.dishes.add(t)
            self._tell(t, DISH_ADD)

    def dish_removed(self, tag: str) -> None:
        t = tag.encode()
        if t in self.dishes:
            self.dishes.discard(t)
            self._tell(t, DISH_DEL)

    def _tell(self, payload: bytes, mtype: int) -> None:
        for lk in self.established_links():
            self.send_on(lk, payload, mtype)

    def link_metadata(self) -> Metadata:
        # The list as of the LINKACK: the RADIO can link to the DISHes one leg sooner.
        return {"dishes": encode_names(self.dishes)}

    def on_link_added(self, link: Link) -> None:
        self.send_on(link, encode_names(self.dishes), DISHES)  # and as of now

    def on_data(self, link: Link, payload: bytes) -> None:
        self.protocol_violation(link, "a group directory takes no messages")


Strategy = Callable[["Radio", list[Link], bytes], bool]


def _send_all(radio: Radio, members: list[Link], framed: bytes) -> bool:
    return send_to_all(radio, members, framed)


def _send_one(radio: Radio, members: list[Link], framed: bytes) -> bool:
    n = len(members)
    start = radio.rr_one % n
    for i in range(n):
        link = members[(start + i) % n]
        if link.can_send:
            radio.rr_one = start + i + 1
            radio.send_on(link, framed)
            return True
    return False


@mypyc_attr(allow_interpreted_subclasses=True)
class Radio(SocketCore):
    """Sends to named groups of DISH sockets it finds by itself (see the module docs).

    Options: ``strategy`` (``ALL`` or ``ONE``: the default for every group),
    ``group_strategies`` (a mapping group -> strategy), ``no_members`` (``"wait"``: a send to
    an empty group blocks until it has members or the timeout passes; ``"error"``: raises
    :class:`~a3m.errors.NoMembers` at once).
    """

    kind = "RADIO"
    send_keywords = frozenset({"group", "strategy"})
    peers = frozenset({"DISH", "GROUPDIR"})
    receives = False
    #: Delivery strategies by name; a subclass may add its own.
    strategies: ClassVar[dict[str, Strategy]] = {ALL: _send_all, ONE: _send_one}

    def __init__(self, node: NodeCore, tag: str, rng: Random | None = None,
                 **options: Any) -> None:
        self.default_strategy = ALL
        self.group_strategies: dict[bytes, str] = {}
        self.no_members = "wait"
        self.rr_one = 0
        self._dishes: dict[str, set[str]] = {}  # node -> the DISH tags its directory lists
        self._members: dict[bytes, list[Link]] | None = None  # group -> links (cache)
        self._blocked: str | None = None
        super().__init__(node, tag, rng, **options)
        self.stats["members_lost"] = 0
        cast(NodeCore, self.node).watch_nodes(self._node_known)

    # ---------------------------------------------------------------- options

    def extra_options(self) -> dict[str, Any]:
        return {"strategy": self.default_strategy,
                "group_strategies": {g.decode(errors="replace"): s
                                     for g, s in self.group_strategies.items()},
                "no_members": self.no_members}

    def set_pattern_option(self, name: str, value: Any) -> None:
        if name == "strategy":
            self.default_strategy = self._strategy(value)
        elif name == "group_strategies":
            self.group_strategies = {group_bytes(g): self._strategy(s)
                                     for g, s in dict(value).items()}
        elif name == "no_members":
            if value not in ("wait", "error"):
                raise UsageError("no_members is 'wait' or 'error'")
            self.no_members = value
        else:
            super().set_pattern_option(name, value)

    def _strategy(self, value: Any) -> str:
        name = str(value).upper()
        if name not in self.strategies:
            raise UsageError(f"unknown group strategy {value!r} (known: "
                             f"{', '.join(sorted(self.strategies))})")
        return name

    # ---------------------------------------------------------------- finding members

    def _node_known(self, node_id: str) -> None:
        if not self.closed:
            self.link((node_id, DIRECTORY_TAG), self.node.now)

    def _set_dishes(self, node_id: str, tags: set[str]) -> None:
        old = self._dishes.get(node_id, set())
        self._dishes[node_id] = tags
        for tag in sorted(tags - old):
            if not self.closed:
                self.link((node_id, tag), self.node.now)
        for tag in old - tags:
            self.unlink((node_id, tag), self.node.now)  # also ends retries of a lost link

    def on_link_added(self, link: Link) -> None:
        meta = link.peer_meta or {}
        kind = meta.get("type")
        link.attrs["dish"] = kind == "DISH"
        if kind == "DISH":
            raw = meta.get("groups", b"")
            link.attrs["groups"] = decode_names(raw if isinstance(raw, bytes) else b"")
        elif isinstance(dishes := meta.get("dishes"), bytes):
            self._set_dishes(link.peer[0], {t.decode(errors="replace")
                                            for t in decode_names(dishes)})
        self._members = None

    def on_link_removed(self, link: Link) -> None:
        self._members = None

    def on_link_lost(self, link: Link, unknown_outcome: bool) -> None:
        if unknown_outcome and link.attrs.get("dish"):
            self.stats["members_lost"] += 1

    def on_control(self, link: Link, mtype: int, payload: bytes) -> None:
        if not link.attrs.get("dish"):
            node_id = link.peer[0]
            tags = set(self._dishes.get(node_id, set()))
            if mtype == DISHES:
                tags = {t.decode(errors="replace") for t in decode_names(payload)}
            elif mtype == DISH_ADD:
                tags.add(payload.decode(errors="replace"))
            elif mtype == DISH_DEL:
                tags.discard(payload.decode(errors="replace"))
            else:
                super().on_control(link, mtype, payload)
                return
            self._set_dishes(node_id, tags)
            return
        groups: set[bytes] = link.attrs.setdefault("groups", set())  # type: ignore[assignment]
        if mtype == JOIN:
            groups.add(payload)
        elif mtype == LEAVE:
            groups.discard(payload)
        elif mtype == GROUPS_RESET:
            link.attrs["groups"] = decode_names(payload)
        else:
            super().on_control(link, mtype, payload)
            return
        self._members = None

    def member_links(self, group: bytes | str) -> list[Link]:
        """The view: established DISH links in ``group``, in a stable order."""
        g = group_bytes(group)
        cache = self._members
        if cache is None:
            cache = self._members = {}
        links = cache.get(g)
        if links is None:
            links = [lk for lk in self.link_ring()
                     if lk.attrs.get("dish") and lk.established
                     and g in lk.attrs.get("groups", ())]  # type: ignore[operator]
            if len(cache) < 1024:
                cache[g] = links
        return links

    def members(self, group: bytes | str) -> list[tuple[str, str]]:
        return [lk.peer for lk in self.member_links(group)]

    # ---------------------------------------------------------------- sending

    def pattern_send(self, payload: bytes, group: bytes | str | None = None,
                     strategy: str | None = None, **kw: Any) -> bool:
        if group is None:
            raise UsageError("a RADIO sends to a group: send(data, group='name')")
        g = group_bytes(group)
        name = (self._strategy(strategy) if strategy is not None
                else self.group_strategies.get(g, self.default_strategy))
        members = self.member_links(g)
        if not members:
            if self.no_members == "error":
                raise NoMembers(f"group {g.decode(errors='replace')!r} has no members")
            self._blocked = f"group {g.decode(errors='replace')!r} has no members yet"
            return False
        if self.strategies[name](self, members, with_topic(g, payload)):
            self._blocked = None
            return True
        self._blocked = f"no credit on the members of {g.decode(errors='replace')!r}"
        return False

    def blocked_reason(self) -> str | None:
        return self._blocked

    def pattern_can_send(self) -> bool:
        return any(lk.can_send for lk in self.links.values() if lk.attrs.get("dish"))

    def close(self, now: float) -> None:
        cast(NodeCore, self.node).unwatch_nodes(self._node_known)
        super().close(now)


@mypyc_attr(allow_interpreted_subclasses=True)
class Dish(Unwrapping):
    """Receives what RADIOs send to the groups it joined (``join`` / ``leave``)."""

    kind = "DISH"
    peers = frozenset({"RADIO"})
    sends = False

    def __init__(self, node: NodeCore, tag: str, rng: Random | None = None,
                 **options: Any) -> None:
        self.groups: set[bytes] = set()
        super().__init__(node, tag, rng, **options)
        GroupDirectory.of(self.node).dish_added(self.tag)

    def link_metadata(self) -> Metadata:
        return {"groups": encode_names(self.groups)}

    def join(self, group: bytes | str) -> None:
        g = group_bytes(group)
        if g in self.groups:
            return
        self.groups.add(g)
        for lk in self.established_links():
            self.send_on(lk, g, JOIN)

    def leave(self, group: bytes | str) -> None:
        g = group_bytes(group)
        if g not in self.groups:
            raise UsageError(f"not in group {g.decode(errors='replace')!r}")
        self.groups.discard(g)
        for lk in self.established_links():
            self.send_on(lk, g, LEAVE)

    def on_link_added(self, link: Link) -> None:
        # The metadata may predate joins made while the handshake ran: send the current set.
        self.send_on(link, encode_names(self.groups), GROUPS_RESET)

    def unwrap(self, payload: bytes, source: tuple[str, str]) -> Received | None:
        framed = split_topic(payload)
        if framed is None:
            return None
        group, body = framed
        return Received(body, source, group, {"group": group.decode(errors="replace")})

    def close(self, now: float) -> None:
        directory = cast(NodeCore, self.node).sockets.get(DIRECTORY_TAG)
        if isinstance(directory, GroupDirectory):
            directory.dish_removed(self.tag)
        super().close(now)
