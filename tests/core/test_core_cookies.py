"""Cookies in the core alone (lossless pipe, fake clock): what the transport reports about a
message decides its outcome when the link cannot tell any more."""

from __future__ import annotations

from a3m.core import message as m
from a3m.core.cookies import NOT_DELIVERED, UNKNOWN

from .pipe import Pipe


def _linked(p: Pipe) -> tuple[object, object]:
    push = p.nodes["a"].create("PUSH", "src")
    pull = p.nodes["b"].create("PULL", "sink")
    push.link(("b", "sink"), p.now)
    p.run()
    assert push.is_linked() and pull.is_linked()
    return push, pull


def _held_back(p: Pipe) -> list[bytes]:
    """What ``a`` sends now, kept from ``b`` (the transport will report on it)."""
    return [data for dst, data in p.nodes["a"].take_output() if dst == "b"]


def test_what_the_transport_gave_up_before_it_left_is_not_delivered() -> None:
    p = Pipe("a", "b")
    push, _ = _linked(p)
    for i in range(3):
        assert push.try_send(b"x", cookie=i)  # type: ignore[attr-defined]
    (batch,) = _held_back(p)  # one BATCH of three, flagged
    assert m.decode(batch).type == m.BATCH
    p.nodes["a"].message_lost("b", batch, p.now, surely_not=True)
    got = push.take_cookies(10)  # type: ignore[attr-defined]
    assert sorted((c.value, c.outcome) for c in got) == [(i, NOT_DELIVERED) for i in range(3)]


def test_what_may_have_reached_a_crashed_node_is_unknown() -> None:
    p = Pipe("a", "b")
    push, _ = _linked(p)
    assert push.try_send(b"x", cookie="one")  # type: ignore[attr-defined]
    (data,) = _held_back(p)
    p.nodes["a"].message_lost("b", data, p.now)
    (c,) = push.take_cookies(10)  # type: ignore[attr-defined]
    assert (c.value, c.outcome) == ("one", UNKNOWN)
