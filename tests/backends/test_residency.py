"""Keep-alive arithmetic and when a model leaves memory."""

from __future__ import annotations

import asyncio
import datetime as dt

import pytest

from dragoman.adapters.errors import Overloaded
from dragoman.backends.residency import Residency, expiry_time, keep_alive_for

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


# -- Residency: in-flight requests, keep-alive by arrival, draining unloads ------------


class Unloads:
    def __init__(self) -> None:
        self.count = 0

    async def __call__(self) -> None:
        await asyncio.sleep(0.01)
        self.count += 1


async def test_keep_alive_zero_waits_for_the_other_requests() -> None:
    unloads = Unloads()
    residency = Residency("m", 300, unloads)
    first = residency.request(None)
    await first.__aenter__()  # a default stream, arrived first
    async with residency.request(0):
        pass  # the keep_alive 0 chat ends first: nothing unloads under the other one
    await asyncio.sleep(0.05)
    assert unloads.count == 0
    await first.__aexit__(None, None, None)  # the last one ends: keep_alive 0 (latest arrival) rules
    await asyncio.sleep(0.05)
    assert unloads.count == 1


async def test_a_later_arrival_resets_keep_alive_zero() -> None:
    unloads = Unloads()
    residency = Residency("m", 300, unloads)
    zero = residency.request(0)
    await zero.__aenter__()
    async with residency.request(None):
        pass
    await zero.__aexit__(None, None, None)
    await asyncio.sleep(0.05)
    assert unloads.count == 0 and residency.expires_at is not None


async def test_an_explicit_unload_drains_and_refuses_new_requests() -> None:
    unloads = Unloads()
    residency = Residency("m", 300, unloads)
    running = residency.request(None)
    await running.__aenter__()
    unload = asyncio.create_task(residency.unload())
    await asyncio.sleep(0.05)
    assert not unload.done() and unloads.count == 0
    with pytest.raises(Overloaded) as info:
        async with residency.request(None):
            pass
    assert info.value.retry_after == 1 and "being unloaded" in info.value.message
    await running.__aexit__(None, None, None)
    await asyncio.wait_for(unload, 1)
    assert unloads.count == 1 and not residency.draining
    async with residency.request(None):  # open again afterwards
        pass


async def test_an_arrival_during_an_idle_unload_waits_for_it() -> None:
    order: list[str] = []

    async def unload() -> None:
        await asyncio.sleep(0.05)
        order.append("unloaded")

    residency = Residency("m", 0, unload)
    async with residency.request(None):
        pass  # keep_alive 0: the unload starts now
    async with residency.request(None):
        order.append("next request runs")
    assert order == ["unloaded", "next request runs"]
