"""When a local model leaves memory: keep-alive and explicit unloads, for the backends
that hold models (``onnx``, ``ctransformers``).

- A request counts from its arrival (waiting in line included) to its end.
- Keep-alive follows Ollama: the latest request to *arrive* says how long the model
  stays after the last one ends (seconds; 0 unloads then; negative keeps it). So a
  ``keep_alive: 0`` chat unloads once the streams running beside it are done, and a
  request arriving after it resets that, whatever order they finish in.
- An explicit unload (``keep_alive: 0`` with no messages) waits for the requests in
  flight and refuses new ones meanwhile (503 with Retry-After), then unloads: it never
  cuts another client's stream.
- A request that arrives while an idle model is being unloaded waits for that, then
  loads it again.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging
from collections.abc import AsyncIterator, Awaitable, Callable

from dragoman.adapters.errors import Overloaded

log = logging.getLogger("dragoman.residency")


def keep_alive_for(requested: float | None, configured: float) -> float:
    """The request's ``keep_alive`` overrides the model entry's."""
    return configured if requested is None else requested


def expiry_time(keep_alive: float, now: dt.datetime) -> dt.datetime | None:
    """When an idle model unloads; None = never, ``now`` = at once."""
    if keep_alive < 0:
        return None
    return now + dt.timedelta(seconds=keep_alive)


class Residency:
    def __init__(self, name: str, configured_keep_alive: float, unload: Callable[[], Awaitable[None]]) -> None:
        self.name = name
        self.configured = configured_keep_alive
        self.in_flight = 0
        self.expires_at: dt.datetime | None = None
        self._unload = unload
        self._keep_alive = configured_keep_alive  # of the latest request to arrive
        self._draining = False
        self._idle = asyncio.Event()
        self._idle.set()
        self._timer: asyncio.TimerHandle | None = None
        self._unloading: asyncio.Task[None] | None = None

    @property
    def draining(self) -> bool:
        return self._draining

    def check_open(self) -> None:
        if self._draining:
            raise Overloaded(
                f"model '{self.name}' is being unloaded once its running requests finish; retry in a moment",
                retry_after=1,
            )

    @contextlib.asynccontextmanager
    async def request(self, keep_alive: float | None) -> AsyncIterator[None]:
        """Hold the model for one request (raises :class:`Overloaded` while an
        explicit unload drains it)."""
        self.check_open()
        if self._unloading is not None:
            await asyncio.shield(self._unloading)
            self.check_open()
        self._cancel_timer()
        self._keep_alive = keep_alive_for(keep_alive, self.configured)
        self.in_flight += 1
        self._idle.clear()
        try:
            yield
        finally:
            self.in_flight -= 1
            if self.in_flight == 0:
                self._idle.set()
                if not self._draining:
                    self._arm(self._keep_alive)

    def loaded(self, keep_alive: float | None) -> None:
        """After an explicit load: the model stays ``keep_alive`` from now if idle."""
        self._keep_alive = keep_alive_for(keep_alive, self.configured)
        if self.in_flight == 0:
            self._arm(self._keep_alive)

    async def unload(self) -> None:
        """Wait for the requests in flight (refusing new ones), then unload."""
        self._draining = True
        self._cancel_timer()
        try:
            await self._idle.wait()
            await self._unload_now()
        finally:
            self._draining = False

    def forget(self) -> None:
        """The model was unloaded by other means (closing): no timer is left."""
        self._cancel_timer()
        self.expires_at = None

    def _arm(self, keep_alive: float) -> None:
        self._cancel_timer()
        self.expires_at = expiry_time(keep_alive, dt.datetime.now(dt.UTC))
        if keep_alive < 0:
            return
        if keep_alive == 0:
            self._start_unload()
        else:
            self._timer = asyncio.get_running_loop().call_later(keep_alive, self._expired)

    def _expired(self) -> None:
        self._timer = None
        if self.in_flight == 0 and not self._draining:
            self._start_unload()

    def _start_unload(self) -> None:
        if self._unloading is None:
            self._unloading = asyncio.get_running_loop().create_task(self._run_unload())

    async def _unload_now(self) -> None:
        self._start_unload()
        assert self._unloading is not None
        await asyncio.shield(self._unloading)

    async def _run_unload(self) -> None:
        try:
            await self._unload()
        except Exception:  # unloading is cleanup: log it, never leave the task failing
            log.exception("unloading model '%s' failed", self.name)
        finally:
            self.expires_at = None
            self._unloading = None

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
