"""Handing the worker's freed heap back to the system once the model has been idle a while.

glibc keeps what was freed for reuse: after eight 1,400-token prompts the idle process
held 614 MiB, 515 after a trim (the prefix cache itself holds 251). Not at once when a
reply ends, though: between the requests of a burst the returned pages faulted in again
and cost single-stream decode 3-8%.
"""

from __future__ import annotations

import ctypes
import sys
import time
from collections.abc import Callable
from typing import Any

TRIM_AFTER = 1.0  # seconds idle before the heap's free memory is handed back


class IdleTrim:
    """When the worker loop hands the heap back: once, ``after`` seconds (default
    :data:`TRIM_AFTER`) after the last round that computed, when no request is held
    (being prepared, or running) by then. A command that computes nothing meanwhile (a
    consumer's late Credit, a Ping) does not put it off; a request arriving does, until
    it has run. The loop asks :meth:`timeout` how long it may wait for a command, tells
    :meth:`handed_back` what the wait brought, and :meth:`computed` after each round
    that computed."""

    def __init__(
        self, after: float | None = None, *, clock: Callable[[], float] = time.monotonic,
        trim: Callable[[], None] | None = None,
    ) -> None:  # fmt: skip
        self.after = TRIM_AFTER if after is None else after
        self._clock = clock
        self._trim = trim
        self._worked = False  # computed since the heap was last handed back
        self._deadline: float | None = None  # when it goes back, once idle

    def computed(self) -> None:
        self._worked, self._deadline = True, None

    def timeout(self, *, holding: bool) -> float | None:
        """The longest the loop may wait for a command now; None: as long as it takes.
        ``holding``: something to compute, or a request being prepared or running (one
        waiting for its consumer too)."""
        now = self._clock()
        if holding:
            self._deadline = None  # a burst's next prompt may be tokenised right now
        elif self._worked and self._deadline is None:
            self._deadline = now + self.after
        return None if self._deadline is None else max(0.0, self._deadline - now)

    def handed_back(self, items: list[Any]) -> bool:
        """True when the wait ran out with nothing and the heap went back; the loop then
        waits again, with no limit."""
        if self._deadline is None or items or self._clock() < self._deadline:
            return False
        self._worked, self._deadline = False, None
        (self._trim or return_freed_memory)()
        return True


def return_freed_memory() -> None:
    """The heap's free memory back to the system, where the C library can (glibc)."""
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL(None).malloc_trim(0)
        except (OSError, AttributeError):  # not glibc (musl has no malloc_trim)
            pass
