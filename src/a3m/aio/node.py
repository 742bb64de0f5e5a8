"""The node of ``a3m.aio``: :class:`a3m.runtime.node.Node` on the asyncio driver.

Everything above the I/O is the threaded node's own code: the socket registry, the
:class:`~a3m.core.transport.ExonBridge`, event handling, the cork window, send buffers and
inboxes, the socket calls (``a3m.runtime.sockets.Socket``). Only the driver differs
(:class:`~a3m.aio.driver.LoopDriver` instead of an I/O thread), and the calls that wait: they
run the same steps (``run_steps``'s generators) with awaits instead of blocking.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from a3m.aio.driver import LoopDriver
from a3m.exon.config import ExonConfig
from a3m.runtime.node import Node
from a3m.runtime.sockets import Socket, Steps, _deadline


async def await_steps(steps: Steps, drv: LoopDriver, deadline: float | None,
                      step: float = 0.05) -> bool:
    """:func:`a3m.runtime.sockets.run_steps` for coroutines: each step runs under the
    node's lock, each condition is awaited (:meth:`LoopDriver.until`)."""
    try:
        with drv.lock:
            done = next(steps)
        while True:
            held = await drv.until(done, deadline, step)
            with drv.lock:
                done = steps.send(held)
    except StopIteration as stop:
        return bool(stop.value)


class LoopNode(Node):
    """An :class:`a3m.Node` driven by the running event loop (create it in a coroutine)."""

    _driver: LoopDriver  # type: ignore[assignment]

    def _make_driver(  # type: ignore[override]
            self, bind: str | tuple[str, int], config: ExonConfig) -> LoopDriver:
        return LoopDriver(self._proto, bind, self._bridge.on_events, name=f"a3m-aio-{self.id}",
                          upper_timer=self._upper_deadline, on_turn=self._on_turn,
                          upper_output=self._upper_output, busy_poll_s=config.busy_poll_s)

    async def close_socket(self, sock: Socket, timeout: float | None) -> bool:
        """``Socket.close`` awaited."""
        if sock._closed:
            return True
        return await await_steps(sock._closing(), self._driver, _deadline(timeout))

    async def aflush(self, timeout: float | None = None) -> bool:
        """``Node.flush`` awaited."""
        return await await_steps(self._flushing(), self._driver, _deadline(timeout), 0.01)

    async def aclose(self, timeout: float | None = None) -> bool:
        """``Node.close`` awaited."""
        if self._closed:
            return True
        deadline = _deadline(timeout)
        clean = True
        for sock in list(self._sockets.values()):
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            clean = await self.close_socket(sock, left) and clean
        drv = self._driver
        clean = await await_steps(self._closing_hidden(), drv, deadline) and clean
        bridge = self._bridge
        clean = await drv.close_protocol(deadline, bridge.pump,
                                         lambda: bool(bridge.outbox)) and clean
        self._closed = True
        if self.journal is not None:  # its thread writes what is left
            wait: Any = None if deadline is None else max(1.0, deadline - time.monotonic())
            await asyncio.get_running_loop().run_in_executor(None, self.journal.close, wait)
        return clean
