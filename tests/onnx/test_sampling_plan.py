"""Sampling options → library search options and numpy processors."""

from __future__ import annotations

import numpy as np
import pytest

from dragoman.adapters.canonical import SamplingOptions
from dragoman.backends.onnx.worker.logits_processors import LogitsProcessor, Mirostat, apply_penalties, log_softmax, min_p_mask, tail_free_mask
from dragoman.backends.onnx.worker_protocol import Processing, Search
from dragoman.backends.onnx.sampling_plan import max_new_tokens, plan_sampling, processing_active

PLANS = [
    ("nothing set is greedy", SamplingOptions(), Search(do_sample=False), Processing()),
    (
        "temperature 0 is greedy, top_p ignored",
        SamplingOptions(temperature=0.0, top_p=0.5),
        Search(do_sample=False),
        Processing(),
    ),
    (
        "sampling knobs the library has",
        SamplingOptions(temperature=0.7, top_p=0.9, top_k=40, seed=3, repeat_penalty=1.1),
        Search(do_sample=True, temperature=0.7, top_p=0.9, top_k=40, repetition_penalty=1.1, random_seed=3),
        Processing(temperature=0.7, seed=3),
    ),
    (
        "neutral values cost nothing",
        SamplingOptions(temperature=0.5, min_p=0.0, repeat_penalty=1.0, presence_penalty=0.0, tfs_z=1.0),
        Search(do_sample=True, temperature=0.5),
        Processing(temperature=0.5),
    ),
    (
        "repeat_last_n moves the repeat penalty into the worker",
        SamplingOptions(repeat_penalty=1.2, repeat_last_n=32),
        Search(do_sample=False),
        Processing(repeat_penalty=1.2, repeat_last_n=32),
    ),
    (
        "repeat_last_n 0 disables the penalty",
        SamplingOptions(repeat_penalty=1.2, repeat_last_n=0),
        Search(do_sample=False),
        Processing(),
    ),
    (
        "penalties apply even when greedy",
        SamplingOptions(presence_penalty=0.5, frequency_penalty=0.2),
        Search(do_sample=False),
        Processing(presence_penalty=0.5, frequency_penalty=0.2),
    ),
    (
        "mirostat picks tokens itself",
        SamplingOptions(temperature=0.8, mirostat=2, mirostat_tau=4.0, seed=1),
        Search(do_sample=False),
        Processing(mirostat=2, mirostat_tau=4.0, temperature=0.8, seed=1),
    ),
    ("mirostat ignored when greedy", SamplingOptions(mirostat=2), Search(do_sample=False), Processing()),
    (
        "min_p and tfs only when sampling",
        SamplingOptions(temperature=1.0, min_p=0.05, tfs_z=0.9),
        Search(do_sample=True, temperature=1.0),
        Processing(min_p=0.05, tfs_z=0.9),
    ),
]


@pytest.mark.parametrize(("name", "options", "search", "processing"), PLANS, ids=[c[0] for c in PLANS])
def test_plan_sampling(name: str, options: SamplingOptions, search: Search, processing: Processing) -> None:
    assert plan_sampling(options) == (search, processing)


def test_processing_active() -> None:
    assert not processing_active(Processing(temperature=0.3, seed=4))
    assert processing_active(Processing(min_p=0.1))


@pytest.mark.parametrize(("num_predict", "expected"), [(None, None), (-1, None), (-2, None), (0, 0), (12, 12)])
def test_max_new_tokens(num_predict: int | None, expected: int | None) -> None:
    assert max_new_tokens(SamplingOptions(num_predict=num_predict)) == expected


LOGITS = np.array([4.0, 2.0, -1.0, 0.0, 1.0], dtype=np.float32)

PENALTIES = [
    ("repeat divides positive, multiplies negative", {"repeat": 2.0}, [0, 2], [2.0, 2.0, -2.0, 0.0, 1.0]),
    ("presence once per token", {"presence": 0.5}, [1, 1, 4], [4.0, 1.5, -1.0, 0.0, 0.5]),
    ("frequency per occurrence", {"frequency": 0.5}, [1, 1, 4], [4.0, 1.0, -1.0, 0.0, 0.5]),
    ("nothing recent", {"repeat": 2.0}, [], list(LOGITS)),
]


@pytest.mark.parametrize(("name", "kwargs", "recent", "expected"), PENALTIES, ids=[c[0] for c in PENALTIES])
def test_apply_penalties(name: str, kwargs: dict[str, float], recent: list[int], expected: list[float]) -> None:
    np.testing.assert_allclose(apply_penalties(LOGITS, recent, **kwargs), expected)


def test_min_p_keeps_tokens_near_the_top() -> None:
    kept = np.isfinite(min_p_mask(LOGITS, 0.1))  # e^-2.3: keeps logits >= 4 - 2.30
    assert kept.tolist() == [True, True, False, False, False]


def test_tail_free_cuts_the_flat_tail() -> None:
    logits = np.array([5.0, 4.9, 4.8, 0.0, -0.1, -0.2, -0.3], dtype=np.float32)
    kept = np.isfinite(tail_free_mask(logits, 0.5))
    assert kept[:3].all() and not kept[4:].any()


def test_mirostat_is_seeded_and_steers_mu() -> None:
    rng = np.random.default_rng(0)
    logits = rng.normal(size=200).astype(np.float32)
    picks = [[Mirostat(version, 3.0, 0.1, 1.0, seed=7).choose(logits) for _ in range(2)] for version in (1, 2)]
    assert picks[0][0] == picks[0][1] and picks[1][0] == picks[1][1]
    m = Mirostat(2, 3.0, 0.5, 1.0, seed=1)
    start = m.mu
    for _ in range(20):
        m.choose(logits)
    assert m.mu != start


def test_processor_forces_the_mirostat_choice() -> None:
    processor = LogitsProcessor(Processing(mirostat=2, seed=5))
    row, token = processor.process(LOGITS, [0, 1])
    assert token is not None and np.isfinite(row).sum() == 1 and row[token] == 0.0


def test_log_softmax_normalises() -> None:
    assert np.isclose(np.exp(log_softmax(LOGITS)).sum(), 1.0)


# Vocabulary-sized rows: a peaked one like a model's, a Zipf-like one, a nearly flat one.
_RNG = np.random.default_rng(11)
VOCAB_ROWS = [
    ("peaked", np.where(np.arange(49152) < 5, 12.0, 0.0).astype(np.float32) + _RNG.normal(size=49152).astype(np.float32)),
    ("zipf", (-1.1 * np.log1p(_RNG.permutation(49152))).astype(np.float32)),
    ("nearly flat", (0.3 * _RNG.normal(size=49152)).astype(np.float32)),
]


def _tail_free_by_full_sort(logits: np.ndarray, z: float) -> np.ndarray:
    """The textbook algorithm, sorting every token: what the head-only sort must equal."""
    order = np.argsort(-logits)
    probs = np.exp(logits[order].astype(np.float64) - logits.max())
    probs /= probs.sum()
    curvature = np.abs(np.diff(probs, n=2))
    cumulative = np.cumsum(curvature / curvature.sum())
    over = np.nonzero(cumulative > z)[0]
    keep = int(over[0]) + 1 if over.size else probs.size
    kept = np.zeros(logits.size, dtype=bool)
    kept[order[:keep]] = True
    return kept


@pytest.mark.parametrize("z", [0.5, 0.95, 0.99])
@pytest.mark.parametrize(("name", "row"), VOCAB_ROWS, ids=[name for name, _ in VOCAB_ROWS])
def test_tail_free_head_sort_is_exact(name: str, row: np.ndarray, z: float) -> None:
    assert (np.isfinite(tail_free_mask(row, z)) == _tail_free_by_full_sort(row, z)).all()


def _mirostat2_by_full_sort(logits: np.ndarray, steps: int, seed: int) -> list[int]:
    rng, mu, picks = np.random.default_rng(seed), 10.0, []
    for _ in range(steps):
        order = np.argsort(-logits)
        probs = np.exp(logits[order].astype(np.float64) - logits.max())
        probs /= probs.sum()
        keep = max(1, int(np.count_nonzero(-np.log2(np.maximum(probs, 1e-30)) <= mu)))
        kept = probs[:keep] / probs[:keep].sum()
        pick = int(rng.choice(keep, p=kept))
        mu -= 0.1 * (-np.log2(max(float(kept[pick]), 1e-30)) - 5.0)
        picks.append(int(order[pick]))
    return picks


@pytest.mark.parametrize(("name", "row"), VOCAB_ROWS, ids=[name for name, _ in VOCAB_ROWS])
def test_mirostat2_sorting_only_the_kept_tokens_is_exact(name: str, row: np.ndarray) -> None:
    mirostat = Mirostat(2, tau=5.0, eta=0.1, temperature=1.0, seed=4)
    assert [mirostat.choose(row) for _ in range(20)] == _mirostat2_by_full_sort(row, 20, seed=4)


@pytest.mark.parametrize(
    ("seed", "want"),
    [(None, None), (-1, None), (0, 0), (42, 42), (2**31 - 1, 2**31 - 1), (2**31, 0), (2**63 - 1, 2**31 - 1)],
)
def test_seeds_fold_into_the_library_range(seed: int | None, want: int | None) -> None:
    from dragoman.backends.onnx.sampling_plan import library_seed

    assert library_seed(seed) == want


@pytest.mark.parametrize(("top_k", "want"), [(None, None), (0, None), (40, 40), (49151, 49151), (49152, None), (10**9, None)])
def test_top_k_past_the_vocabulary_is_the_whole_vocabulary(top_k: int | None, want: int | None) -> None:
    search, _ = plan_sampling(SamplingOptions(temperature=0.7, top_k=top_k), vocab_size=49152)
    assert search.top_k == want


def test_logit_bias_comes_first_and_changes_the_greedy_pick() -> None:
    row = np.array([1.0, 3.0, 2.0], dtype=np.float32)
    processing = Processing(logit_bias={1: -100.0, 0: 0.5})
    assert processing_active(processing)
    out, forced = LogitsProcessor(processing).process(row, [])
    assert forced is None and int(np.argmax(out)) == 2
    assert out.tolist() == [1.5, -97.0, 2.0] and row.tolist() == [1.0, 3.0, 2.0]  # a new row
