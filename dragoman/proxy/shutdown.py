"""Graceful shutdown: after SIGTERM, running streams get a grace period, then end with an
error event; new chat requests are refused with 503 meanwhile."""

from __future__ import annotations

import asyncio
import time

from dragoman.adapters.errors import Overloaded


class Draining(Overloaded):
    """The server is shutting down."""


class Lifetime:
    def __init__(self, grace: float) -> None:
        self.grace = grace
        self.draining = False
        self.deadline: float | None = None  # time.monotonic() after which streams are ended
        self.in_flight = 0

    def begin_shutdown(self) -> None:
        if not self.draining:
            self.draining = True
            self.deadline = time.monotonic() + self.grace

    def check_accepting(self) -> None:
        if self.draining:
            raise Draining("server is shutting down; retry on another instance", retry_after=1)

    async def drained(self) -> None:
        """Wait until no chat is running, or the grace period is over."""
        while self.in_flight and (self.deadline is None or time.monotonic() < self.deadline):
            await asyncio.sleep(0.05)
