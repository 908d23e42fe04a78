"""Stand-ins that outlive one test (a module-scoped replay upstream or image host) are
reset before each test, so that no test reads what another one did to them."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Protocol, TypeVar


class Resettable(Protocol):
    def reset(self) -> None:
        """Forget what was received and played so far; keep serving."""


S = TypeVar("S", bound=Resettable)

_live: list[Resettable] = []  # the stand-ins running now, in the order they started


@contextmanager
def reset_between_tests(stand_in: S) -> Iterator[S]:
    """``stand_in`` is reset before each test for as long as this block runs."""
    _live.append(stand_in)
    try:
        yield stand_in
    finally:
        _live.remove(stand_in)


def reset_all() -> None:
    for stand_in in list(_live):
        stand_in.reset()
