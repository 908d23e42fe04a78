"""Builds a server starts, one at a time and one per source.

- One per source: a second request for a build already under way (three pulls of
  ``ollama:qwen2.5:7b``) starts no second process; it follows the first — a line
  saying so, the stage the build is at, every line from then on, and its outcome.
- One at a time: a build of another source waits in line, with a progress line
  naming the build it waits for. Waiting rather than refusing: the sources a server
  can build are the few in its config and its local Ollama store, so the line is
  short, each source's build is shared, and a client (``ollama pull``, Open WebUI's
  pull screen) gets its model instead of an error to retry by hand. The memory check
  of each build runs in its own process when its turn comes, after the previous build
  has let go of its memory.

Across processes (``server.workers: N``, a ``dragoman models prepare`` beside the
server) the build process itself takes ``<home>/build.lock`` (:mod:`.build_lock`).
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Awaitable, Callable, Hashable
from typing import Generic, TypeVar

T = TypeVar("T")
Event = TypeVar("Event")


class _Running(Generic[T, Event]):
    """A build under way: who listens, where it is, and its outcome."""

    def __init__(self, label: str) -> None:
        self.label = label
        self.listeners: list[Callable[[Event], object]] = []
        self.position: Event | None = None  # the last stage line, for whoever joins
        self.task: asyncio.Future[T] | None = None

    def emit(self, event: Event, *, is_stage: bool = False) -> None:
        if is_stage:
            self.position = event
        for listener in list(self.listeners):
            listener(event)


class BuildQueue(Generic[T, Event]):
    """The builds of one event loop (one server process)."""

    def __init__(self) -> None:
        self.running: dict[Hashable, _Running[T, Event]] = {}
        self.turn = asyncio.Lock()
        self.current: str | None = None  # the label of the build that holds the turn

    async def run(
        self,
        key: Hashable,
        label: str,
        build: Callable[[Callable[[Event], None]], Awaitable[T]],
        on_event: Callable[[Event], object] | None,
        *,
        status: Callable[[str], Event],
        is_stage: Callable[[Event], bool],
    ) -> T:
        """``build(emit)`` for ``key`` unless it runs already; either way its outcome,
        and its events on ``on_event`` (from where it is when this call joins)."""
        running = self.running.get(key)
        if running is None:
            running = self.running[key] = _Running(label)
            running.task = asyncio.ensure_future(self._take_turn(key, running, build, status, is_stage))
            # Retrieved here too: when every caller has left, nobody else reads a failure.
            running.task.add_done_callback(lambda task: task.cancelled() or task.exception())
        elif on_event is not None:
            on_event(status(f"joining the build of {label} already under way"))
            if running.position is not None:
                on_event(running.position)
        if on_event is not None:
            running.listeners.append(on_event)
        assert running.task is not None
        try:
            # Shielded: a caller that leaves (a client gone) stops listening, not the build.
            return await asyncio.shield(running.task)
        finally:
            if on_event is not None:
                running.listeners.remove(on_event)

    async def _take_turn(
        self,
        key: Hashable,
        running: _Running[T, Event],
        build: Callable[[Callable[[Event], None]], Awaitable[T]],
        status: Callable[[str], Event],
        is_stage: Callable[[Event], bool],
    ) -> T:
        try:
            if self.turn.locked():
                running.emit(status(f"waiting: the build of {self.current} runs first (one build at a time); "
                                    "this one starts when it ends"))  # fmt: skip
            async with self.turn:
                self.current = label = running.label
                try:
                    return await build(lambda event: running.emit(event, is_stage=is_stage(event)))
                finally:
                    if self.current == label:
                        self.current = None
        finally:
            self.running.pop(key, None)


_queues: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, BuildQueue] = weakref.WeakKeyDictionary()  # type: ignore[type-arg]


def queue() -> BuildQueue:  # type: ignore[type-arg]
    """This event loop's queue (a server has one loop; tests run several in turn)."""
    loop = asyncio.get_running_loop()
    found = _queues.get(loop)
    if found is None:
        found = _queues[loop] = BuildQueue()
    return found


__all__ = ["BuildQueue", "queue"]
