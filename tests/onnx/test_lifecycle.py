"""Keep-alive arithmetic and the bounded admission queue."""

from __future__ import annotations

import asyncio
import datetime as dt

import pytest

from adapters.errors import Overloaded
from backends.onnx.lifecycle import Admission, expiry_time, keep_alive_for

NOW = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)

KEEP_ALIVE = [
    ("request unset: the entry's", None, 300.0, 300.0),
    ("request wins", 10.0, 300.0, 10.0),
    ("request 0 wins", 0.0, 300.0, 0.0),
    ("request forever", -1.0, 300.0, -1.0),
]


@pytest.mark.parametrize(("name", "requested", "configured", "expected"), KEEP_ALIVE, ids=[c[0] for c in KEEP_ALIVE])
def test_keep_alive_for(name: str, requested: float | None, configured: float, expected: float) -> None:
    assert keep_alive_for(requested, configured) == expected


EXPIRY = [
    ("forever", -1.0, None),
    ("at once", 0.0, NOW),
    ("five minutes", 300.0, NOW + dt.timedelta(minutes=5)),
]


@pytest.mark.parametrize(("name", "keep_alive", "expected"), EXPIRY, ids=[c[0] for c in EXPIRY])
def test_expiry_time(name: str, keep_alive: float, expected: dt.datetime | None) -> None:
    assert expiry_time(keep_alive, NOW) == expected


async def test_admission_runs_queues_then_refuses() -> None:
    admission = Admission(max_active=1, max_waiting=1)
    release = asyncio.Event()
    order: list[str] = []

    async def job(name: str) -> None:
        async with admission.slot("m"):
            order.append(name)
            await release.wait()

    first = asyncio.create_task(job("first"))
    await asyncio.sleep(0)
    second = asyncio.create_task(job("second"))
    await asyncio.sleep(0)
    assert (admission.active, admission.waiting) == (1, 1)
    with pytest.raises(Overloaded) as info:
        async with admission.slot("m"):
            pass
    assert (
        info.value.retry_after == 1
        and info.value.status == 503
        and "1 requests running and 1 waiting" in str(info.value)
    )
    release.set()
    await asyncio.gather(first, second)
    assert order == ["first", "second"] and admission.idle


async def test_a_cancelled_waiter_leaves_the_queue() -> None:
    admission = Admission(max_active=1, max_waiting=4)
    hold = asyncio.Event()

    async def job() -> None:
        async with admission.slot("m"):
            await hold.wait()

    running = asyncio.create_task(job())
    await asyncio.sleep(0)
    waiting = asyncio.create_task(job())
    await asyncio.sleep(0)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    assert admission.waiting == 0
    hold.set()
    await running
    assert admission.idle
