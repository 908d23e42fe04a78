"""The prefix cache, the KV slab and the sampler: the batch engine's pure parts."""

from __future__ import annotations

import numpy as np
import pytest

from dragoman.backends.onnx.worker.kv_slab import KvSlab
from dragoman.backends.onnx.worker.prefix_cache import PrefixCache, shared_prefix
from dragoman.backends.onnx.worker_protocol import Search
from dragoman.backends.onnx.worker.sampler import Sampler


def ids(*values: int) -> np.ndarray:
    return np.array(values, dtype=np.int32)


def kv(length: int, fill: float = 1.0) -> np.ndarray:
    return np.full((4, 2, length, 8), fill, dtype=np.float32)  # 2 layers, 2 heads, head size 8: 256 B a position


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [((1, 2, 3), (1, 2, 3), 3), ((1, 2, 3), (1, 2, 4), 2), ((1, 2), (1, 2, 3), 2), ((), (1,), 0), ((5,), (6,), 0)],
)
def test_shared_prefix(a: tuple[int, ...], b: tuple[int, ...], expected: int) -> None:
    assert shared_prefix(ids(*a), ids(*b)) == expected


def test_longest_shared_prefix_wins_and_short_ones_do_not_count() -> None:
    cache = PrefixCache(max_bytes=1 << 20, max_entries=8, min_tokens=3)
    cache.put(ids(1, 2, 3, 4, 5), kv(5, 1))
    cache.put(ids(1, 2, 9, 9, 9, 9), kv(6, 2))
    entry, length = cache.longest(ids(1, 2, 3, 4, 7))
    assert length == 4 and entry is not None and entry.kv[0, 0, 0, 0] == 1
    assert cache.longest(ids(1, 2, 8)) == (None, 0)  # shares 2 < min_tokens
    assert (cache.hits, cache.misses) == (1, 1)


def test_an_entry_that_is_a_prefix_of_a_new_one_is_dropped() -> None:
    cache = PrefixCache(max_bytes=1 << 20, max_entries=8, min_tokens=1)
    cache.put(ids(1, 2, 3), kv(3))  # turn 1
    cache.put(ids(1, 2, 3, 4, 5, 6), kv(6))  # turn 2 holds all of turn 1
    assert len(cache) == 1 and cache.covers(ids(1, 2, 3)) and cache.covers(ids(1, 2, 3, 4))
    assert not cache.covers(ids(1, 2, 3, 4, 5, 6, 7))


def test_bounded_by_bytes_and_count_least_recently_used_first() -> None:
    per_entry = kv(10).nbytes + ids(*range(10)).nbytes
    cache = PrefixCache(max_bytes=3 * per_entry, max_entries=8, min_tokens=1)
    for first in (100, 200, 300):
        cache.put(ids(*range(first, first + 10)), kv(10))
    cache.longest(ids(*range(100, 110)))  # 100… is now the most recently used
    cache.put(ids(*range(400, 410)), kv(10))
    assert cache.nbytes <= cache.max_bytes and len(cache) == 3
    assert cache.longest(ids(*range(200, 210)))[0] is None  # evicted: least recently used
    assert cache.longest(ids(*range(100, 110)))[1] == 10
    small = PrefixCache(max_bytes=1 << 20, max_entries=2, min_tokens=1)
    for first in (1, 20, 40):
        small.put(ids(*range(first, first + 5)), kv(5))
    assert len(small) == 2 and small.longest(ids(1, 2, 3, 4, 5))[0] is None


def test_room_is_made_before_the_new_entry_is_copied() -> None:
    """The engine's copy of a prompt's KV (tens of MiB) is made only once the entries
    it displaces are gone, so the cache never holds more than its bound, not even for
    the moment of a copy; a prompt too big to keep is not copied at all."""
    per_entry = kv(10).nbytes + ids(*range(10)).nbytes
    cache = PrefixCache(max_bytes=3 * per_entry, max_entries=3, min_tokens=1)
    held_while_copying = []

    def read(length: int):  # type: ignore[no-untyped-def]
        def copy() -> np.ndarray:
            held_while_copying.append(cache.nbytes)
            return kv(length)

        return copy

    for first in range(100, 700, 100):
        assert cache.keep(ids(*range(first, first + 10)), kv(10).nbytes, read(10))
        assert cache.nbytes <= cache.max_bytes and len(cache) <= 3
    assert max(held_while_copying) + per_entry <= cache.max_bytes
    copies = len(held_while_copying)
    assert not cache.keep(ids(*range(40)), kv(40).nbytes, read(40))  # more than the whole bound
    assert len(held_while_copying) == copies and len(cache) == 3


def test_too_big_or_too_short_is_not_kept() -> None:
    cache = PrefixCache(max_bytes=kv(4).nbytes, max_entries=8, min_tokens=3)
    assert not cache.put(ids(*range(8)), kv(8))
    assert not cache.put(ids(1, 2), kv(2))
    assert len(cache) == 0 and cache.nbytes == 0


def test_slab_grows_keeping_rows_and_moves_them() -> None:
    slab = KvSlab(layers=2, kv_heads=2, head_size=8, dtype=np.dtype(np.float32), max_positions=1000)
    slab.ensure(1, 10)
    assert (slab.rows, slab.capacity) == (1, 256)
    slab.write(0, kv(10, 3.0), 10)
    before = slab.generation
    slab.ensure(3, 300)  # more rows and more positions: a new allocation, row 0 kept
    assert (slab.rows, slab.capacity) == (3, 512) and slab.generation != before
    assert np.all(slab.read(0, 10) == 3.0)
    slab.write(2, kv(5, 7.0), 5)
    slab.swap(0, 2, 10)
    assert np.all(slab.read(0, 5) == 7.0) and np.all(slab.read(2, 10) == 3.0)
    slab.move(2, 1, 10)
    assert np.all(slab.read(1, 10) == 3.0)
    views = slab.layer_views(0, 2)
    assert len(views) == 4 and all(v.flags["C_CONTIGUOUS"] and v.shape == (2, 2, 512, 8) for v in views)
    assert slab.layer_views(1, 1)[0].flags["C_CONTIGUOUS"]
    with pytest.raises(ValueError, match="limit of 1000"):
        slab.ensure(1, 1001)
    slab.ensure(1, 900)
    assert slab.capacity == 1000  # growth stops at the limit
    slab.release()
    assert slab.nbytes == 0 and slab.rows == 0


def test_sampler_greedy_penalty_and_seeds() -> None:
    logits = np.array([1.0, 3.0, 2.9, -1.0], dtype=np.float32)
    assert Sampler(Search(), {}, 4, ids()).choose(logits) == 1
    # The penalty counts the prompt: token 1 seen, 3.0 / 1.5 < 2.9.
    assert Sampler(Search(repetition_penalty=1.5), {}, 4, ids(1)).choose(logits) == 2
    negative = np.array([-1.0, -0.5, -0.6, -3.0], dtype=np.float32)
    assert Sampler(Search(repetition_penalty=2.0), {}, 4, ids(1)).choose(negative) == 2  # -0.5 × 2 < -0.6
    wide = np.linspace(0, 1, 100, dtype=np.float32)

    def draws(seed: int | None, **options: float) -> list[int]:
        sampler = Sampler(Search(do_sample=True, random_seed=seed, **options), {"top_k": 50}, 100, ids())  # type: ignore[arg-type]
        return [sampler.choose(wide) for _ in range(40)]

    assert draws(7) == draws(7) and draws(7) != draws(8)
    assert min(draws(7)) >= 50  # the model's default top_k of 50 applies when unset
    assert set(draws(3, top_k=2)) <= {98, 99}
    assert set(draws(3, top_p=0.01, top_k=0)) == {99}  # only the head that reaches top_p
    masked = np.full(100, -np.inf, dtype=np.float32)
    masked[[10, 20]] = 0.0
    sampler = Sampler(Search(do_sample=True, random_seed=1, top_k=0), {}, 100, ids())
    assert {sampler.choose(masked) for _ in range(30)} <= {10, 20}
