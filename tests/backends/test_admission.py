"""The bounded admission queue shared by the proxy's per-model gate and the ONNX backend."""

from __future__ import annotations

import asyncio

import pytest

from dragoman.adapters.errors import Overloaded
from dragoman.backends.admission import Admission


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
