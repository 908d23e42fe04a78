"""Sampling options → the library's sample arguments, and the logit edits."""

from __future__ import annotations

import math
import random
from typing import Any

import numpy as np
import pytest

from dragoman.adapters.canonical import SamplingOptions
from dragoman.adapters.errors import RequestError, UnsupportedFeature
from dragoman.backends.ctransformers.sampling import SamplePlan, edit_logits, plan_sampling, sample_arguments

VOCAB = 1000

ARGUMENT_CASES: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
    (
        "unset: the library's defaults",
        {"seed": 5},
        {"top_k": 40, "top_p": 0.95, "temperature": 0.8, "repetition_penalty": 1.1, "last_n_tokens": 64, "seed": 5},
    ),
    (
        "temperature 0 is top-k 1 (the C code divides by it)",
        {"temperature": 0, "top_k": 50, "top_p": 0.5},
        {"top_k": 1, "top_p": 1.0, "temperature": 1.0},
    ),
    ("top_k 0 is the whole vocabulary (k <= 0 crashes the GGML sampler)", {"top_k": 0}, {"top_k": VOCAB}),
    ("top_k beyond the vocabulary is clamped", {"top_k": 10**6}, {"top_k": VOCAB}),
    ("top_p is clamped to [0, 1]", {"top_p": 1.7}, {"top_p": 1.0}),
    ("repeat_last_n 0 turns the penalty off", {"repeat_last_n": 0, "repeat_penalty": 1.5}, {"repetition_penalty": 1.0}),
    ("repeat_last_n -1 is the whole context", {"repeat_last_n": -1}, {"last_n_tokens": -1}),
    (
        "knobs pass through",
        {"temperature": 0.5, "top_k": 7, "top_p": 0.9, "repeat_penalty": 1.3, "repeat_last_n": 32},
        {"temperature": 0.5, "top_k": 7, "top_p": 0.9, "repetition_penalty": 1.3, "last_n_tokens": 32},
    ),
]


@pytest.mark.parametrize(("name", "options", "expected"), ARGUMENT_CASES, ids=[c[0] for c in ARGUMENT_CASES])
def test_sample_arguments(name: str, options: dict[str, Any], expected: dict[str, Any]) -> None:
    arguments = sample_arguments(plan_sampling(SamplingOptions(**options)), VOCAB, 0)
    assert {k: arguments[k] for k in expected} == expected


def test_each_token_gets_its_own_seed_and_a_fixed_seed_repeats() -> None:
    plan = plan_sampling(SamplingOptions(seed=41))
    assert [sample_arguments(plan, VOCAB, step)["seed"] for step in range(3)] == [41, 42, 43]
    wraps = plan_sampling(SamplingOptions(seed=2**31 - 1))
    assert sample_arguments(wraps, VOCAB, 1)["seed"] == 0  # never negative: that means "time of day" in C


def test_without_a_seed_each_request_draws_one() -> None:
    draws = {plan_sampling(SamplingOptions(), draw_seed=random.Random(i)).seed for i in range(5)}
    assert len(draws) == 5 and all(0 <= d < 2**31 for d in draws)


LIMIT_CASES = [
    ("unset: until the context is full", None, None),
    ("negative: Ollama's infinite", -1, None),
    ("a limit", 12, 12),
]


@pytest.mark.parametrize(("name", "num_predict", "expected"), LIMIT_CASES, ids=[c[0] for c in LIMIT_CASES])
def test_max_new_tokens(name: str, num_predict: int | None, expected: int | None) -> None:
    assert plan_sampling(SamplingOptions(num_predict=num_predict)).max_new_tokens == expected


REFUSED_CASES: list[tuple[str, dict[str, Any], type[Exception], str]] = [
    ("tail-free sampling", {"tfs_z": 0.9}, UnsupportedFeature, "options.tfs_z"),
    ("mirostat", {"mirostat": 2}, UnsupportedFeature, "options.mirostat"),
    ("a zero repeat penalty", {"repeat_penalty": 0.0}, RequestError, "options.repeat_penalty"),
]


@pytest.mark.parametrize(("name", "options", "error", "param"), REFUSED_CASES, ids=[c[0] for c in REFUSED_CASES])
def test_refused_options_name_the_option(
    name: str, options: dict[str, Any], error: type[Exception], param: str
) -> None:
    with pytest.raises(error) as caught:
        plan_sampling(SamplingOptions(**options))
    assert caught.value.param == param  # type: ignore[attr-defined]


def test_neutral_values_of_missing_knobs_are_accepted() -> None:
    plan = plan_sampling(SamplingOptions(tfs_z=1.0, mirostat=0, presence_penalty=0.0, frequency_penalty=0.0, min_p=0.0))
    assert not plan.edits_logits


def _plan(**changes: Any) -> SamplePlan:
    base: dict[str, Any] = {"greedy": False, "top_k": 0, "top_p": 1.0, "temperature": 1.0, "repeat_penalty": 1.0}
    return SamplePlan(**{**base, "repeat_last_n": 64, "seed": 0, **changes})


EDIT_CASES: list[tuple[str, SamplePlan, list[int], list[float]]] = [
    ("frequency counts each repeat", _plan(frequency_penalty=0.5), [1, 1, 2], [0.0, -1.0, -0.5, 0.0]),
    ("presence counts once", _plan(presence_penalty=2.0), [1, 1, 2], [0.0, -2.0, -2.0, 0.0]),
    ("only the repeat window counts", _plan(presence_penalty=1.0, repeat_last_n=1), [1, 1, 3], [0.0, 0.0, 0.0, -1.0]),
    ("window 0 counts nothing", _plan(presence_penalty=1.0, repeat_last_n=0), [1], [0.0, 0.0, 0.0, 0.0]),
]


@pytest.mark.parametrize(("name", "plan", "context", "expected"), EDIT_CASES, ids=[c[0] for c in EDIT_CASES])
def test_penalties_edit_the_logits_in_place(
    name: str, plan: SamplePlan, context: list[int], expected: list[float]
) -> None:
    logits = np.zeros(4, np.float32)
    edit_logits(logits, plan, context)
    assert logits.tolist() == expected


def test_min_p_masks_tokens_below_the_share_of_the_best() -> None:
    logits = np.log(np.array([0.5, 0.3, 0.04, 0.16], np.float32))
    edit_logits(logits, _plan(min_p=0.1), [])  # keep p >= 0.05
    assert np.isinf(logits[2]) and np.isfinite(logits[[0, 1, 3]]).all()
    hot = np.log(np.array([0.5, 0.3, 0.04, 0.16], np.float32))
    edit_logits(hot, _plan(min_p=0.1, temperature=2.0), [])  # flatter: 0.04 survives
    assert np.isfinite(hot).all()
    assert math.isclose(float(hot.max()), math.log(0.5), rel_tol=1e-6)
