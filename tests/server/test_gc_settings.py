"""A serving process collects its young generation less often and freezes the app."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from dragoman.proxy.gc_settings import YOUNG_THRESHOLD, tune_for_serving


@pytest.fixture
def restored_gc() -> Iterator[None]:
    threshold = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*threshold)


def test_tuning_raises_only_the_young_threshold_and_freezes(restored_gc: None) -> None:
    gc.set_threshold(700, 10, 10)
    tune_for_serving()
    assert gc.get_threshold() == (YOUNG_THRESHOLD, 10, 10)
    assert gc.get_freeze_count() > 0


def test_a_higher_threshold_already_set_is_kept(restored_gc: None) -> None:
    gc.set_threshold(YOUNG_THRESHOLD * 5, 20, 30)
    tune_for_serving()
    assert gc.get_threshold() == (YOUNG_THRESHOLD * 5, 20, 30)
