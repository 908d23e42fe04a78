"""Loaded model instances, lent one request at a time.

A ctransformers model object is not re-entrant (one KV cache, one logits buffer), so
each running request holds an instance of its own: ``max_concurrent`` instances
(mmap shares the weights; each has its own cache). The line in front of them is the
backend's :class:`~backends.admission.Admission` (``max_queue`` waiting, beyond that a
503 with Retry-After at once), which outlives a reload: /metrics reads its gauges. An
instance comes back when the thread using it has stopped, never when the request that
borrowed it goes away.
"""

from __future__ import annotations

from collections import deque
from typing import Any

from dragoman.backends.admission import Admission


class InstancePool:
    def __init__(self, instances: list[Any], admission: Admission) -> None:
        self.admission = admission
        self._free: deque[Any] = deque(instances)

    async def acquire(self, model: str) -> Any:
        """A free instance once admitted; raises :class:`Overloaded` when the line is
        full. Admission lets in no more than there are instances (its ``max_active``)."""
        await self.admission.acquire(model)
        return self._free.popleft()

    def release(self, instance: Any) -> None:
        """Give ``instance`` back and its slot to the first in line."""
        self._free.append(instance)
        self.admission.release()

    def take_all(self) -> list[Any]:
        """The free instances, removed (for unloading)."""
        free, self._free = list(self._free), deque()
        return free
