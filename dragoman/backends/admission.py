"""A bounded admission queue: up to ``max_active`` at once, up to ``max_waiting`` more
in line (first come, first served), the rest refused at once with 503 and
``Retry-After`` rather than piling up. Used per model by the proxy's optional gate and
by the ONNX backend."""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import AsyncIterator

from opentelemetry import trace

from dragoman.adapters.errors import Overloaded

# A span only while a request waits for its slot; a no-op unless tracing is on (proxy/tracing.py).
_TRACER = trace.get_tracer("dragoman")


class Admission:
    def __init__(self, max_active: int, max_waiting: int) -> None:
        self.max_active = max_active
        self.max_waiting = max_waiting
        self.active = 0
        self._waiters: deque[asyncio.Future[None]] = deque()

    @property
    def waiting(self) -> int:
        return len(self._waiters)

    @property
    def idle(self) -> bool:
        return self.active == 0 and not self._waiters

    async def acquire(self, model: str) -> None:
        if self.active < self.max_active and not self._waiters:
            self.active += 1
            return
        if len(self._waiters) >= self.max_waiting:
            raise Overloaded(
                f"model '{model}' is busy: {self.active} requests running and {self.waiting} waiting; retry shortly",
                retry_after=1,
            )
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            with _TRACER.start_as_current_span("admission wait", attributes={"dragoman.waiting": len(self._waiters)}):
                await waiter  # release() hands its slot over, so active is already counted
        except BaseException:
            if waiter.done() and not waiter.cancelled():
                self.release()  # the slot arrived as we were cancelled: pass it on
            else:
                self._waiters.remove(waiter)
            raise

    def release(self) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return
        self.active -= 1

    @contextlib.asynccontextmanager
    async def slot(self, model: str) -> AsyncIterator[None]:
        """Hold one slot for the block; raises :class:`Overloaded` when the line is full."""
        await self.acquire(model)
        try:
            yield
        finally:
            self.release()
