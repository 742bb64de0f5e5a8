"""The send buffer shared by :class:`a3m.Socket` and :class:`a3m.exon.Endpoint`: in a stream,
sends wait in it for the I/O thread's next turn instead of taking the node's lock, as many as
the windows took when it opened (its *room*: credits set aside), so that a send still returns
only once the message can go. The owner drains it under the node's lock, first thing in any
call that takes that lock, so order holds (lock order: the node's, then the buffer's)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Generic, TypeVar

_T = TypeVar("_T")


class SendBuffer(Generic[_T]):
    __slots__ = ("_lock", "items", "room", "stalled")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.items: list[_T] = []
        #: How many more sends it takes (0: closed, sends take the node's lock).
        self.room = 0
        #: The last drain left sends behind (the windows or links did not take them): they
        #: wait first in line, retried on every turn.
        self.stalled = False

    def offer(self, item: _T) -> bool:
        """From any thread: queue ``item`` if the buffer has room (False: take the lock)."""
        with self._lock:
            if self.room > 0:
                self.room -= 1
                self.items.append(item)
                return True
        return False

    def offer_many(self, items: list[_T]) -> bool:
        """From any thread: queue all of ``items`` if the buffer has room for all of them
        (False, nothing queued: take the lock)."""
        with self._lock:
            if self.room >= len(items):
                self.room -= len(items)
                self.items += items
                return True
        return False

    def drain(self, hand: Callable[[list[_T]], int]) -> bool:
        """Under the node's lock: hand what waits on, in order (``hand`` returns how many it
        took); True when some went. The buffer takes nothing more until it opens again (when
        there was something). What ``hand`` did not take stays first in line, and the buffer
        is :attr:`stalled` until a drain takes it all."""
        with self._lock:
            items = self.items
            if items:
                self.items = []
                self.room = 0
        if not items:
            self.stalled = False
            return False
        went = hand(items)
        self.stalled = went < len(items)
        if self.stalled:
            with self._lock:
                self.items[:0] = items[went:]
        return went > 0

    def open(self, room: int) -> bool:
        """Under the node's lock: take up to ``room`` sends (less what waits already); False
        when that leaves no room."""
        with self._lock:
            room -= len(self.items)
            self.room = max(room, 0)
        return room > 0

    def shut(self) -> bool:
        """Under the node's lock: take nothing more; True when nothing waits either."""
        with self._lock:
            self.room = 0
            return not self.items

    def clear(self) -> list[_T]:
        """Under the node's lock: shut it and give up what waits (returned)."""
        with self._lock:
            items, self.items = self.items, []
            self.room = 0
        self.stalled = False
        return items
