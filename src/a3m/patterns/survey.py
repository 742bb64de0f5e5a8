"""SURVEYOR / RESPONDENT: a survey goes to every respondent; answers are collected until the
survey's deadline (option ``survey_time_s``); answers to an older survey are dropped."""

from __future__ import annotations

from collections import deque
from random import Random
from typing import Any

from mypy_extensions import mypyc_attr

from a3m.core.link import Link
from a3m.core.node_core import NodeCore
from a3m.core.socket_core import Received, SocketCore
from a3m.errors import Timeout, UsageError
from a3m.patterns.framing import send_to_all, split_id, with_id


@mypyc_attr(allow_interpreted_subclasses=True)
class Surveyor(SocketCore):
    kind = "SURVEYOR"
    peers = frozenset({"RESPONDENT"})

    def __init__(self, node: NodeCore, tag: str, rng: Random | None = None,
                 **options: Any) -> None:
        # survey_time_s is taken from the options (not a keyword-only parameter beside
        # **options: mypyc cannot write that signature)
        survey_time_s = options.pop("survey_time_s", 1.0)
        self.survey_time_s = 1.0
        super().__init__(node, tag, rng, **options)
        self.set_pattern_option("survey_time_s", survey_time_s)
        self._survey = self.rng.randrange(1 << 32)
        self.exchange = True  # (a survey: handed off at once, never corked)
        self._deadline: float | None = None  # of the survey under way
        self._expired = False  # its deadline passed (answers after it are dropped)
        self._answers: deque[tuple[Link, Received]] = deque()

    def extra_options(self) -> dict[str, Any]:
        return {"survey_time_s": self.survey_time_s}

    def set_pattern_option(self, name: str, value: Any) -> None:
        if name != "survey_time_s":
            super().set_pattern_option(name, value)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
            raise UsageError(f"survey_time_s must be a number of seconds > 0, got {value!r}")
        self.survey_time_s = float(value)

    def pattern_send(self, payload: bytes, **kw: Any) -> bool:
        links = self.established_links()
        survey = (self._survey + 1) & 0xFFFFFFFF
        if not send_to_all(self, links, with_id(survey, payload)):
            return False
        self._survey = survey
        for link, _ in self._answers:  # unread answers to the last survey: dropped
            self.dropped_from(link)
        self._answers.clear()
        self._deadline = self.node.now + self.survey_time_s
        self._expired = False
        return True

    def pattern_can_send(self) -> bool:
        return all(lk.can_send for lk in self.established_links())

    def on_data(self, link: Link, payload: bytes) -> None:
        framed = split_id(payload)
        if (framed is not None and framed[0] == self._survey and self._deadline is not None
                and not self._expired and self.node.now < self._deadline):
            self._answers.append((link, Received(framed[1], link.peer)))
        else:
            self.dropped_from(link)  # a late answer, or to an earlier survey

    def choose_recv(self) -> Received | None:
        if self._answers:
            link, answer = self._answers.popleft()
            self.delivered_from(link)
            return answer
        if self._deadline is None:
            raise UsageError("SURVEYOR: no survey under way; send one first")
        if self._expired or self.node.now >= self._deadline:
            self._deadline = None
            self._expired = False
            raise Timeout("SURVEYOR: the survey's deadline passed")
        return None

    @property
    def readable(self) -> bool:
        return bool(self._answers)

    def next_timer(self) -> float | None:
        base = super().next_timer()
        if self._deadline is None or self._expired:
            return base  # a passed deadline stays passed until recv reports it: no timer
        return self._deadline if base is None else min(base, self._deadline)

    def handle_timer(self, now: float) -> None:
        super().handle_timer(now)
        if self._deadline is not None and now >= self._deadline:
            self._expired = True  # wakes a blocked recv (the node notifies after timers)


@mypyc_attr(allow_interpreted_subclasses=True)
class Respondent(SocketCore):
    kind = "RESPONDENT"
    peers = frozenset({"SURVEYOR"})

    def __init__(self, node: NodeCore, tag: str, rng: Random | None = None,
                 **options: Any) -> None:
        super().__init__(node, tag, rng, **options)
        self._surveys: deque[tuple[Link, int, bytes]] = deque()
        self.exchange = True  # (a response: handed off at once, never corked)
        self._owed: tuple[Link, int] | None = None

    def on_data(self, link: Link, payload: bytes) -> None:
        framed = split_id(payload)
        if framed is None:
            self.protocol_violation(link, "a survey without an id")
            return
        self._surveys.append((link, framed[0], framed[1]))

    def choose_recv(self) -> Received | None:
        while self._surveys:
            link, ident, body = self._surveys.popleft()
            if link.established:
                self.delivered_from(link)
                self._owed = (link, ident)
                return Received(body, link.peer)
            self.dropped_from(link)
        return None

    @property
    def readable(self) -> bool:
        return bool(self._surveys)

    def pattern_send(self, payload: bytes, **kw: Any) -> bool:
        if self._owed is None:
            raise UsageError("RESPONDENT: no survey to answer; receive one first")
        link, ident = self._owed
        if not link.established:
            self._owed = None
            return True  # the surveyor went away: nobody is waiting for this answer
        if not link.can_send:
            return False
        self._owed = None
        self.send_on(link, with_id(ident, payload))
        return True

    def pattern_can_send(self) -> bool:
        return self._owed is not None and self._owed[0].can_send
