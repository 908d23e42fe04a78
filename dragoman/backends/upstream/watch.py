"""Idle and total deadlines for the reads of one reply, without a timer per read.

``asyncio.timeout_at`` around every read costs a timer handle each time (about 9 µs
here, more than decoding the chunk). A :class:`ReadWatch` keeps one handle per reply
and re-arms it only when it fires before the deadline it guards: a stream that keeps
flowing costs one ``loop.time()`` per read. When a read has waited too long, the
watch cancels the reading task, and the read turns that cancellation, and only that
one, into ``TimeoutError`` (as ``asyncio.timeout`` does, with ``uncancel``).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator


class ReadWatch:
    """Each read may wait ``idle`` seconds, and none may end after ``total_deadline``
    (an event-loop time). ``expired`` names the timeout that ended a read."""

    __slots__ = ("_loop", "_idle", "_total", "_task", "_handle", "_waiting_since", "expired")

    def __init__(self, idle: float, total_deadline: float) -> None:
        self._loop = asyncio.get_running_loop()
        self._idle = idle
        self._total = total_deadline
        self._task: asyncio.Task[object] | None = None
        self._handle: asyncio.TimerHandle | None = None
        self._waiting_since: float | None = None
        self.expired: str | None = None

    async def read(self, chunks: AsyncIterator[bytes]) -> bytes | None:
        """The next piece from ``chunks`` (None at the end), or ``TimeoutError``."""
        self._waiting_since = self._loop.time()
        self._task = asyncio.current_task()
        if self._handle is None:
            self._handle = self._loop.call_at(self._deadline(), self._fire)
        try:
            return await anext(chunks, None)
        except asyncio.CancelledError:
            if self.expired is not None and self._task is not None and self._task.uncancel() == 0:
                raise TimeoutError(self.expired) from None
            raise
        finally:
            self._waiting_since = None

    def close(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def _deadline(self) -> float:
        since = self._waiting_since if self._waiting_since is not None else self._loop.time()
        return min(since + self._idle, self._total)

    def _fire(self) -> None:
        self._handle = None
        if self._waiting_since is None:
            return  # not reading now; the next read arms a new handle
        deadline = self._deadline()
        if self._loop.time() < deadline:
            self._handle = self._loop.call_at(deadline, self._fire)
            return
        self.expired = "idle_timeout" if deadline < self._total else "total_timeout"
        if self._task is not None:
            self._task.cancel()


__all__ = ["ReadWatch"]
