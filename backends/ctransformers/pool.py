"""Loaded model instances, lent one request at a time.

A ctransformers model object is not re-entrant (one KV cache, one logits buffer), so
each running request holds an instance of its own: ``max_concurrent`` instances
(mmap shares the weights; each has its own cache), ``max_queue`` requests waiting,
and beyond that a 503 with Retry-After at once. An instance comes back when the
thread using it has stopped, never when the request that borrowed it goes away.
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Any

from adapters.errors import Overloaded


class InstancePool:
    def __init__(self, instances: list[Any], max_queue: int) -> None:
        self.size = len(instances)
        self.max_queue = max_queue
        self._free: deque[Any] = deque(instances)
        self._waiters: deque[asyncio.Future[Any]] = deque()

    @property
    def active(self) -> int:
        return self.size - len(self._free)

    @property
    def waiting(self) -> int:
        return len(self._waiters)

    @property
    def idle(self) -> bool:
        return not self.active and not self._waiters

    async def acquire(self, model: str) -> Any:
        """A free instance; waits in line, or raises :class:`Overloaded` when the
        line is full."""
        if self._free and not self._waiters:
            return self._free.popleft()
        if len(self._waiters) >= self.max_queue:
            raise Overloaded(
                f"model '{model}' is busy: {self.active} requests running and {self.waiting} waiting; retry shortly",
                retry_after=1,
            )
        waiter: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            return await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self.release(waiter.result())  # handed over just as the client left
            raise
        finally:
            if waiter in self._waiters:
                self._waiters.remove(waiter)

    def release(self, instance: Any) -> None:
        """Give ``instance`` to the first waiter still waiting, else back to the pool."""
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(instance)
                return
        self._free.append(instance)

    def take_all(self) -> list[Any]:
        """The free instances, removed (for unloading)."""
        free, self._free = list(self._free), deque()
        return free
