"""Read deadlines without a timer per read: idle and total timeouts, and a real
cancellation left a cancellation."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from dragoman.backends.upstream.watch import ReadWatch


async def pieces(*gaps: float) -> AsyncIterator[bytes]:
    """One piece after each gap (seconds)."""
    for gap in gaps:
        await asyncio.sleep(gap)
        yield b"x"


async def read_all(watch: ReadWatch, chunks: AsyncIterator[bytes], busy: float = 0.0) -> int:
    count = 0
    try:
        while await watch.read(chunks) is not None:
            count += 1
            await asyncio.sleep(busy)  # the consumer's own work between reads
    finally:
        watch.close()
    return count


CASES = [
    # (name, gaps between pieces, idle, total, consumer's time per piece, pieces read or the timeout)
    ("steady stream", [0.01] * 10, 0.2, 5.0, 0.0, 10),
    ("a gap longer than idle", [0.01, 0.01, 0.4], 0.1, 5.0, 0.0, "idle_timeout"),
    ("steady but too long in all", [0.05] * 10, 0.2, 0.2, 0.0, "total_timeout"),
    ("slow consumer is not upstream idleness", [0.0] * 4, 0.1, 5.0, 0.15, 4),
]


@pytest.mark.parametrize(("name", "gaps", "idle", "total", "busy", "outcome"), CASES, ids=[c[0] for c in CASES])
async def test_read_watch(name: str, gaps: list[float], idle: float, total: float, busy: float, outcome: object) -> None:
    loop = asyncio.get_running_loop()
    watch = ReadWatch(idle, loop.time() + total)
    if isinstance(outcome, int):
        assert await read_all(watch, pieces(*gaps), busy) == outcome
    else:
        with pytest.raises(TimeoutError):
            await read_all(watch, pieces(*gaps), busy)
        assert watch.expired == outcome


async def test_a_real_cancellation_stays_a_cancellation() -> None:
    loop = asyncio.get_running_loop()
    watch = ReadWatch(5.0, loop.time() + 5.0)
    task = asyncio.ensure_future(read_all(watch, pieces(10.0)))
    await asyncio.sleep(0.05)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert watch.expired is None


async def test_the_task_goes_on_after_a_timeout() -> None:
    loop = asyncio.get_running_loop()
    watch = ReadWatch(0.05, loop.time() + 5.0)
    with pytest.raises(TimeoutError):
        await read_all(watch, pieces(1.0))
    await asyncio.sleep(0.01)  # no cancellation left pending on this task
    assert asyncio.current_task().cancelling() == 0  # type: ignore[union-attr]
