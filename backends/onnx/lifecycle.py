"""How long a loaded model stays, and how many requests it takes at once.

Keep-alive follows Ollama: seconds after the last request finishes; 0 unloads right
away; negative keeps the model forever. Admission bounds work per model: up to
``max_concurrent`` generations run, up to ``max_queue`` more wait, the rest are
refused with 503 and ``Retry-After`` rather than piling up.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
from collections.abc import AsyncIterator

from adapters.errors import Overloaded


def keep_alive_for(requested: float | None, configured: float) -> float:
    """The request's ``keep_alive`` overrides the model entry's."""
    return configured if requested is None else requested


def expiry_time(keep_alive: float, now: dt.datetime) -> dt.datetime | None:
    """When an idle model unloads; None = never, ``now`` = at once."""
    if keep_alive < 0:
        return None
    return now + dt.timedelta(seconds=keep_alive)


class Admission:
    def __init__(self, max_active: int, max_waiting: int) -> None:
        self.max_active = max_active
        self.max_waiting = max_waiting
        self.active = 0
        self.waiting = 0
        self._free = asyncio.Condition()

    @property
    def idle(self) -> bool:
        return self.active == 0 and self.waiting == 0

    @contextlib.asynccontextmanager
    async def slot(self, model: str) -> AsyncIterator[None]:
        """Hold one generation slot; raises :class:`Overloaded` when the queue is full."""
        if self.active >= self.max_active and self.waiting >= self.max_waiting:
            raise Overloaded(
                f"model '{model}' is busy: {self.active} requests running and {self.waiting} waiting; retry shortly",
                retry_after=1,
            )
        self.waiting += 1
        try:
            async with self._free:
                await self._free.wait_for(lambda: self.active < self.max_active)
                self.active += 1
        finally:
            self.waiting -= 1
        try:
            yield
        finally:
            self.active -= 1
            async with self._free:
                self._free.notify(1)
