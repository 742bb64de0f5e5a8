"""The send buffer shared by :class:`a3m.Socket` and :class:`a3m.exon.Endpoint`: in a stream,
sends wait in it for the I/O thread's next turn instead of taking the node's lock, as many as
the windows took when it opened (its *room*: credits set aside), so that a send still returns
only once the message can go. The owner drains it under the node's lock, first thing in any
call that takes that lock, so order holds (lock order: the node's, then the buffer's).

:class:`SendBuffer` is the specification; the native data plane has its twin
(``a3m._native.SendBuffer``, with ``FastSend``: a socket's ``send`` into it in one native
call), chosen by :func:`new_send_buffer`."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, Generic, TypeVar, cast

_T = TypeVar("_T")


class SendBuffer(Generic[_T]):
    __slots__ = ("_lock", "items", "marks", "room", "stalled")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.items: list[_T] = []
        #: A mark per item (a socket's cookies), once any item has one (None: none has).
        self.marks: list[Any] | None = None
        #: How many more sends it takes (0: closed, sends take the node's lock).
        self.room = 0
        #: The last drain left sends behind (the windows or links did not take them): they
        #: wait first in line, retried on every turn.
        self.stalled = False

    def __len__(self) -> int:
        """How many items wait."""
        return len(self.items)

    def offer(self, item: _T, mark: Any = None) -> bool:
        """From any thread: queue ``item`` (with ``mark``, if not None) if the buffer has
        room (False: take the lock)."""
        with self._lock:
            if self.room > 0:
                self.room -= 1
                marks = self.marks
                if mark is not None and marks is None:
                    marks = self.marks = [None] * len(self.items)
                if marks is not None:
                    marks.append(mark)
                self.items.append(item)
                return True
        return False

    def offer_many(self, items: list[_T], marks: list[Any] | None = None,
                   max_size: int = -1) -> bool:
        """From any thread: queue all of ``items`` (with ``marks``, one each) if the buffer
        has room for all of them (False, nothing queued: take the lock). With ``max_size``
        (>= 0), only if every item is ``bytes`` of at most that many bytes: a socket's
        ``send_many`` checks its messages here, one pass for both."""
        if max_size >= 0 and items:
            sized = cast("list[bytes]", items)
            if set(map(type, sized)) != {bytes} or max(map(len, sized)) > max_size:
                return False
        with self._lock:
            if self.room >= len(items):
                self.room -= len(items)
                if marks is not None or self.marks is not None:
                    self._mark(marks if marks is not None else [None] * len(items))
                self.items += items
                return True
        return False

    def _mark(self, marks: list[Any]) -> None:
        if self.marks is None:
            self.marks = [None] * len(self.items)
        self.marks += marks

    def drain(self, hand: Callable[[list[_T], list[Any] | None], int]) -> bool:
        """Under the node's lock: hand what waits on, in order (``hand`` returns how many it
        took); True when some went. The buffer takes nothing more until it opens again (when
        there was something). What ``hand`` did not take stays first in line, and the buffer
        is :attr:`stalled` until a drain takes it all."""
        with self._lock:
            items, marks = self.items, self.marks
            if items:
                self.items = []
                self.marks = None
                self.room = 0
        if not items:
            self.stalled = False
            return False
        try:
            went = min(hand(items, marks), len(items))
        except BaseException:
            went = 0  # (nothing was taken: all of it goes back first in line)
            raise
        finally:
            self._put_back(items, marks, went)
        return went > 0

    def _put_back(self, items: list[_T], marks: list[Any] | None, went: int) -> None:
        """What a drain handed on from ``went`` on goes back first in line, before what
        came since (the buffer is :attr:`stalled` while some does)."""
        self.stalled = went < len(items)
        if self.stalled:
            with self._lock:
                if marks is not None or self.marks is not None:
                    later = self.marks if self.marks is not None else [None] * len(self.items)
                    self.marks = (marks[went:] if marks is not None
                                  else [None] * (len(items) - went)) + later
                self.items[:0] = items[went:]

    def give_up_marked(self) -> list[Any]:
        """Under the node's lock: take out what waits with a mark (a cookie), keeping the
        order of the rest; the marks given up, in order."""
        with self._lock:
            marks = self.marks
            if marks is None:
                return []
            self.items = [x for x, m in zip(self.items, marks, strict=True) if m is None]
            self.marks = None
            return [m for m in marks if m is not None]

    def clear_marks(self) -> list[Any]:
        """Under the node's lock: the marks of what waits (before :meth:`clear`)."""
        with self._lock:
            return [m for m in self.marks or () if m is not None]

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
        """Under the node's lock: shut it and give up what waits (returned; their marks, if
        any, are taken by :meth:`clear_marks` first)."""
        with self._lock:
            items, self.items = self.items, []
            self.marks = None
            self.room = 0
        self.stalled = False
        return items


def new_send_buffer() -> Any:
    """A send buffer: the native twin where the native data plane runs, else
    :class:`SendBuffer`."""
    from a3m._dataplane import native

    if native is not None and hasattr(native, "SendBuffer"):
        return native.SendBuffer()
    return SendBuffer()
