"""Keep-alive arithmetic."""

from __future__ import annotations

import datetime as dt

import pytest

from backends.onnx.lifecycle import expiry_time, keep_alive_for

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
