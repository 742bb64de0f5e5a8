"""``close()`` is bounded for every link state (issue 40): a link still LINKING to a node that
is up (its transport answers) but never answers the link, here a bare ``a3m.exon.Endpoint``,
is cancelled after ``CANCEL_LINKING_S``; the socket's and the node's close return, even with
no timeout, on both drivers. Bounds are generous: nothing here depends on the machine's
speed."""

from __future__ import annotations

import asyncio
import threading

import a3m
import a3m.aio
from a3m.core.socket_links import CANCEL_LINKING_S
from a3m.exon import Endpoint


def _silent() -> Endpoint:
    """A node that answers Exon (acknowledges the LINK) and never answers the link."""
    return Endpoint("cb-silent")


def test_a_linking_link_to_a_silent_node_does_not_hold_close() -> None:
    with _silent() as ep, a3m.Node("cb-a") as a:
        a.associate("cb-silent", ep.address)
        push = a.socket(a3m.PUSH, "out")
        push.link("cb-silent/in")
        assert ep.recv(timeout=30)[0] == "cb-a"  # the LINK arrived (and was acknowledged)
        assert not push.wait_linked(timeout=0.2)
        done: list[bool] = []
        closer = threading.Thread(target=lambda: done.append(push.close()))  # no timeout
        closer.start()
        closer.join(60 + CANCEL_LINKING_S)  # (a hang's bound, not a figure)
        assert done == [True], "close() with no timeout never returned"
        assert not push.links  # the cancel ended it, not a link made meanwhile
        kinds = [e.kind for e in a.events(timeout=0)]
        assert "linked" not in kinds and "link_refused" not in kinds  # our own cancel: quiet
        other = a.socket(a3m.PUSH, "out2")
        other.link("cb-silent/in")
        closed: list[bool] = []
        closer = threading.Thread(target=lambda: closed.append(a.close()))  # no timeout
        closer.start()
        closer.join(60 + CANCEL_LINKING_S)
        assert closed == [True], "the node's close never returned"  # its sockets' first


def test_a_linking_link_to_a_silent_node_does_not_hold_close_in_asyncio() -> None:
    async def main() -> None:
        with _silent() as ep:
            async with a3m.aio.Node("cb-aio") as a:
                a.associate("cb-silent", ep.address)
                push = a.socket(a3m.PUSH, "out")
                push.link("cb-silent/in")
                await asyncio.to_thread(ep.recv, 30)
                # (wait_for's bound is a hang's, not a figure)
                assert await asyncio.wait_for(push.close(), 60 + CANCEL_LINKING_S) is True
                assert not push.links
                assert await asyncio.wait_for(a.close(), 60) is True

    asyncio.run(main())
