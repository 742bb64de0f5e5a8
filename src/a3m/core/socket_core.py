"""The socket engine: links, handshake rules, credits, ordering, and the pattern extension points.

A socket pattern (PUSH, PULL, PAIR, ... or a user's own kind) subclasses :class:`SocketCore`
and overrides the hooks in the "extension points" section, as NNG's protocol ops do; the core
never knows what "push" means. Everything here is sans-I/O: messages leave through the node
core's ``emit`` and time comes in as ``now``.

The class is composed of parts, one module each (``socket_state.py`` says how they
stack); this module holds the extension points and the options.
"""

from __future__ import annotations

from random import Random
from typing import Any

from mypy_extensions import mypyc_attr

from a3m.core.link import OK, REASONS, Link, PeerId, State
from a3m.core.message import Metadata
from a3m.core.node_base import NodeBase
from a3m.core.socket_links import LinkLifecycle
from a3m.core.socket_state import CTRL_ALLOWANCE, INF, Received, SocketOptions
from a3m.errors import UsageError


@mypyc_attr(allow_interpreted_subclasses=True)  # the patterns subclass it
class SocketCore(LinkLifecycle):
    """A socket's engine. Subclass it to make a socket pattern (see the extension points)."""

    def __init__(self, node: NodeBase, tag: str, rng: Random | None = None,
                 **options: Any) -> None:
        super().__init__(node, tag, rng)
        cls = type(self)
        self._batch_send = (cls.pattern_send is SocketCore.pattern_send
                            and cls.choose_send_link is SocketCore.choose_send_link)
        self._batch_recv = cls.choose_recv is SocketCore.choose_recv
        self._default_on_data = cls.on_data is SocketCore.on_data
        self.plain_recv = (self.receives and self._batch_recv
                           and cls.orphan is SocketCore.orphan)
        self.plain_send = self.sends and self._batch_send
        for name, value in options.items():
            self.set_option(name, value)

    # ================================================================ extension points

    def on_link_added(self, link: Link) -> None:
        """A link became established (it can carry DATA now)."""

    def on_link_removed(self, link: Link) -> None:
        """A link stopped being usable for sending (unlinking or closed)."""

    def on_link_lost(self, link: Link, unknown_outcome: bool) -> None:
        """The transport lost track of the link's peer and the link is about to end:
        ``unknown_outcome`` when one of its messages may or may not have been delivered (the
        peer's node crashed with it in flight), False when the peer stopped answering."""

    def link_metadata(self) -> Metadata:
        """Extra LINK metadata this pattern (or a user's condition) sends."""
        return {}

    def check_link(self, peer: PeerId, meta: Metadata) -> int:
        """A custom link condition: return OK or a refusal code (e.g. ``link.REFUSED``)."""
        return OK

    def choose_send_link(self, payload: bytes, **kw: Any) -> Link | None:
        """The link the next message goes to; default: round robin over links with credits."""
        ring = self._ring if self._ring is not None else self.link_ring()
        n = len(ring)
        if n == 1:
            return ring[0] if ring[0].can_send else None
        start = self._rr_send
        for i in range(n):
            link = ring[(start + i) % n]
            if link.can_send:
                self._rr_send = (start + i + 1) % n
                return link
        return None

    def on_data(self, link: Link, payload: bytes) -> None:
        """A DATA message arrived in order; default: queue it for the application."""
        link.inq.append(payload)
        if not link.ready:
            link.ready = True
            self._ready.append(link)

    def on_data_many(self, link: Link, payloads: list[bytes]) -> None:
        """Several DATA messages arrived in order (a BATCH); default: :meth:`on_data` for
        each (queued for the application at once when ``on_data`` is the default). A hook
        that raises loses only its own message: the rest are still handed on."""
        if self._default_on_data:
            link.inq.extend(payloads)
            if not link.ready:
                link.ready = True
                self._ready.append(link)
            return
        failed: Exception | None = None
        for payload in payloads:
            try:
                self.on_data(link, payload)
            except Exception as exc:
                failed = failed or exc
        if failed is not None:
            raise failed

    def on_control(self, link: Link, mtype: int, payload: bytes) -> None:
        """A pattern control message (type >= 0x40) arrived in order."""
        self.protocol_violation(link, f"unexpected control message {mtype:#x}")

    def choose_recv(self) -> Received | None:
        """The next message for the application; default: fair round robin over links."""
        got = self.next_from_links()
        return None if got is None else Received(got[1], got[0].peer)

    def orphan(self, received: Received) -> Received | None:
        """A message that arrived on a link that has closed since, as the application will
        get it: a pattern that frames its payloads unwraps it here as in :meth:`choose_recv`
        (None: not for the application after all)."""
        return received

    def pattern_can_send(self) -> bool:
        """Whether a send would find a link now (used for POLLOUT)."""
        return any(lk.can_send for lk in self.links.values())

    def pattern_send(self, payload: bytes, **kw: Any) -> bool:
        """Send one application message; False when it must wait (no credits, no link)."""
        link = self.choose_send_link(payload, **kw)
        if link is None:
            return False
        self.send_on(link, payload)
        return True

    def pattern_send_many(self, payloads: list[bytes], **kw: Any) -> int:
        """Send the first messages of ``payloads`` that can go now, in order; returns how
        many. Default: with the default :meth:`pattern_send` and :meth:`choose_send_link`,
        round robin by runs (each link its share of what is left, as far as its credits
        allow, as BATCHes: ``_run_share``); otherwise :meth:`pattern_send` one by one."""
        n = len(payloads)
        sent = 0
        if not self._batch_send:
            send = self.pattern_send
            while sent < n and send(payloads[sent], **kw):
                sent += 1
            return sent
        while sent < n:
            link = self.choose_send_link(payloads[sent], **kw)
            if link is None:
                break
            k = self._run_share(link, n - sent, n)
            self.send_many_on(link, payloads[sent:sent + k] if k < n else payloads)
            sent += k
        return sent

    def blocked_reason(self) -> str | None:
        """Why the last send could not go (the runtime puts it in its WouldBlock / Timeout
        message); None: the usual (no link, or no credit)."""
        return None

    def extra_options(self) -> dict[str, Any]:
        """Pattern options (name -> current value); set through :meth:`set_pattern_option`."""
        return {}

    def set_pattern_option(self, name: str, value: Any) -> None:
        raise UsageError(f"unknown option {name!r} for a {self.kind} socket")

    # ================================================================ options

    def get_option(self, name: str) -> Any:
        if hasattr(self.options, name):
            return getattr(self.options, name)
        extra = self.extra_options()
        if name in extra:
            return extra[name]
        raise UsageError(f"unknown option {name!r} for a {self.kind} socket")

    def set_option(self, name: str, value: Any) -> None:
        if self.lent:
            self.take_back()
        if not hasattr(self.options, name):
            self.set_pattern_option(name, value)
            return
        if name == "capacity":
            if not isinstance(value, int) or value < 1:
                raise UsageError("capacity must be an int >= 1")
            for link in self.links.values():
                flow = link.recv.set_capacity(value)
                if flow is not None and link.state in (State.ESTABLISHED, State.UNLINKING):
                    self._send_flow(link, flow)
        elif name == "max_cookies":
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise UsageError("max_cookies must be an int >= 1")
            self.jar.limit = value
        elif name in ("keepalive_s", "idle_probe_s"):
            if not isinstance(value, (int, float)) or isinstance(value, bool) or value < 0:
                raise UsageError(f"{name} must be a number >= 0")
            setattr(self.options, name, value)
            for link in self.links.values():  # (a new period: every deadline follows it)
                if link.state is State.ESTABLISHED:
                    link.ka_at = INF
                    due = self._keepalive_due(link)
                    if due < INF:
                        self._arm_keepalive(link, due)
            return
        elif name == "capacity_max":
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise UsageError("capacity_max must be an int >= 0")
            for link in self.links.values():
                link.recv.limit = value
        setattr(self.options, name, value)


__all__ = ["SocketCore", "SocketOptions", "Received", "REASONS", "CTRL_ALLOWANCE"]
