"""Socket patterns, each built only on the public extension points of
:class:`a3m.core.socket_core.SocketCore` (the same ones a user's custom socket kind uses).

Compatibility (checked at link time; anything else is refused as fatal):
PAIR-PAIR, PUSH-PULL, REQ-REP, PUB-SUB (and XPUB for PUB, XSUB for SUB, forwarders),
DEALER-ROUTER, DEALER-DEALER, ROUTER-ROUTER, SURVEYOR-RESPONDENT, BUS-BUS, RADIO-DISH
(a RADIO also links to each node's hidden group directory).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from a3m.core.socket_core import SocketCore
from a3m.patterns.bus import Bus
from a3m.patterns.groups import Dish, GroupDirectory, Radio
from a3m.patterns.pair import Pair
from a3m.patterns.pipeline import Pull, Push
from a3m.patterns.pubsub import Pub, Sub, XPub, XSub
from a3m.patterns.reqrep import Rep, Req
from a3m.patterns.router import Dealer, Router
from a3m.patterns.survey import Respondent, Surveyor

BUILTIN: dict[str, type[SocketCore]] = {
    "PAIR": Pair,
    "PUSH": Push,
    "PULL": Pull,
    "REQ": Req,
    "REP": Rep,
    "PUB": Pub,
    "SUB": Sub,
    "XPUB": XPub,
    "XSUB": XSub,
    "DEALER": Dealer,
    "ROUTER": Router,
    "SURVEYOR": Surveyor,
    "RESPONDENT": Respondent,
    "BUS": Bus,
    "RADIO": Radio,
    "DISH": Dish,
}

if TYPE_CHECKING:
    from a3m.core.node_core import NodeCore


def register_builtin(core: NodeCore) -> NodeCore:
    """Register every kind of :data:`BUILTIN` on ``core`` (what a node does when it is made);
    returns ``core``."""
    for name, cls in BUILTIN.items():
        core.register_type(name, cls)
    return core


__all__ = ["BUILTIN", "Bus", "Dealer", "Dish", "GroupDirectory", "Pair", "Radio", "Pub", "Pull", "Push", "Rep", "Req",
           "Respondent", "Router", "Sub", "Surveyor", "XPub", "XSub",
           "register_builtin"]
