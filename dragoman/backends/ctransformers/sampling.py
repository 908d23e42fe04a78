"""Request sampling options → arguments of ctransformers' ``LLM.sample``.

The library samples in C with top-k, top-p, temperature and a repetition penalty
over the last n tokens. Around it: temperature 0 becomes top-k 1 (the C code divides
by the temperature), top-k 0 the whole vocabulary (the GGML-era sampler crashes on
k ≤ 0), and each token gets its own seed (the C code re-seeds its generator on every
call, so one fixed seed would draw the same random number for every token).
Presence and frequency penalties and min-p are applied here, to the logits in the
library's buffer before it samples. Knobs with no counterpart (tfs_z, mirostat) are
refused unless neutral: a client that sets them expects an effect.
"""

from __future__ import annotations

import math
import random
from collections import Counter
from collections.abc import Sequence

import msgspec
import numpy as np

from dragoman.adapters.canonical import SamplingOptions
from dragoman.adapters.errors import RequestError, UnsupportedFeature

# ctransformers' own defaults (``ctransformers.llm.Config``) for knobs left unset.
DEFAULT_TOP_K = 40
DEFAULT_TOP_P = 0.95
DEFAULT_TEMPERATURE = 0.8
DEFAULT_REPEAT_PENALTY = 1.1
DEFAULT_REPEAT_LAST_N = 64
_SEED_MASK = 0x7FFFFFFF  # the C side takes a signed int; negative means "time of day"


class SamplePlan(msgspec.Struct, frozen=True):
    greedy: bool
    top_k: int  # 0: the whole vocabulary
    top_p: float
    temperature: float
    repeat_penalty: float
    repeat_last_n: int  # -1: the whole context
    seed: int  # of the first token; token i uses seed + i
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    min_p: float = 0.0
    max_new_tokens: int | None = None  # None: until the context is full
    stop: tuple[str, ...] = ()

    @property
    def edits_logits(self) -> bool:
        return bool(self.presence_penalty or self.frequency_penalty or (self.min_p and not self.greedy))


def plan_sampling(options: SamplingOptions, *, draw_seed: random.Random | None = None) -> SamplePlan:
    """Options already merged with the model's defaults. Raises
    :class:`UnsupportedFeature` naming a knob the backend cannot honour."""
    _refuse_unsupported(options)
    temperature = DEFAULT_TEMPERATURE if options.temperature is None else options.temperature
    penalty = DEFAULT_REPEAT_PENALTY if options.repeat_penalty is None else options.repeat_penalty
    if penalty <= 0:
        raise RequestError("repeat_penalty must be greater than 0 (1 turns it off)", param="options.repeat_penalty")
    window = DEFAULT_REPEAT_LAST_N if options.repeat_last_n is None else options.repeat_last_n
    if window == 0:  # Ollama: 0 turns the penalty off (the library would read it as "all")
        penalty = 1.0
    seed = options.seed if options.seed is not None and options.seed >= 0 else (draw_seed or random).getrandbits(31)
    top_p = DEFAULT_TOP_P if options.top_p is None else options.top_p
    return SamplePlan(
        greedy=temperature <= 0,
        top_k=max(DEFAULT_TOP_K if options.top_k is None else options.top_k, 0),
        top_p=min(max(top_p, 0.0), 1.0),
        temperature=temperature,
        repeat_penalty=penalty,
        repeat_last_n=-1 if window < 0 else window,
        seed=seed & _SEED_MASK,
        presence_penalty=options.presence_penalty or 0.0,
        frequency_penalty=options.frequency_penalty or 0.0,
        min_p=options.min_p or 0.0,
        max_new_tokens=None if options.num_predict is None or options.num_predict < 0 else options.num_predict,
        stop=tuple(s for s in options.stop or () if s),
    )


def _refuse_unsupported(options: SamplingOptions) -> None:
    if options.tfs_z is not None and options.tfs_z != 1.0:
        raise UnsupportedFeature("the ctransformers backend has no tail-free sampling (tfs_z)", param="options.tfs_z")
    if options.mirostat:
        raise UnsupportedFeature("the ctransformers backend has no mirostat sampling", param="options.mirostat")


def sample_arguments(plan: SamplePlan, vocab_size: int, step: int) -> dict[str, int | float]:
    """Keyword arguments of ``LLM.sample`` for the ``step``-th generated token."""
    if plan.greedy:
        top_k, top_p, temperature = 1, 1.0, 1.0
    else:
        top_k = vocab_size if plan.top_k <= 0 else min(plan.top_k, vocab_size)
        top_p, temperature = plan.top_p, plan.temperature
    return {
        "top_k": top_k,
        "top_p": top_p,
        "temperature": temperature,
        "repetition_penalty": plan.repeat_penalty,
        "last_n_tokens": plan.repeat_last_n,
        "seed": (plan.seed + step) & _SEED_MASK,
    }


def edit_logits(logits: np.ndarray, plan: SamplePlan, context: Sequence[int]) -> None:
    """Apply presence/frequency penalties (OpenAI's formula, over the repeat window,
    as llama.cpp does) and min-p, in place, to the last row of ``logits``."""
    window = context if plan.repeat_last_n < 0 else context[-plan.repeat_last_n :] if plan.repeat_last_n else ()
    if (plan.presence_penalty or plan.frequency_penalty) and window:
        counts = Counter(t for t in window if 0 <= t < logits.shape[0])
        ids = np.fromiter(counts.keys(), dtype=np.int64, count=len(counts))
        seen = np.fromiter(counts.values(), dtype=np.float32, count=len(counts))
        logits[ids] -= seen * plan.frequency_penalty + plan.presence_penalty
    if plan.min_p and not plan.greedy:
        # p_i >= min_p * p_max  ⟺  logit_i >= logit_max + T * ln(min_p)
        floor = float(logits.max()) + plan.temperature * math.log(plan.min_p)
        logits[logits < floor] = -np.inf
