"""Numpy logits processors for the knobs ONNX Runtime GenAI lacks.

Each works on one row of logits (``float32[vocab]``) and returns a new row; masked
tokens become ``-inf``. The library still applies its own temperature/top-k/top-p
afterwards, as llama.cpp applies temperature last. Mirostat picks the token itself.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence

import numpy as np

from dragoman.backends.onnx.worker_protocol import Processing
from dragoman.backends.onnx.sampling_plan import DEFAULT_PENALTY_WINDOW

NEG_INF = np.float32(-np.inf)
TFS_CANDIDATES = (1024, 8192)  # heads tail-free sampling sorts before the whole vocabulary
MIROSTAT1_M = 100  # top tokens mirostat 1 estimates the Zipf exponent from (the paper's m)


def apply_penalties(
    logits: np.ndarray,
    recent: Sequence[int],
    *,
    repeat: float | None = None,
    presence: float | None = None,
    frequency: float | None = None,
) -> np.ndarray:
    """llama.cpp's penalties over the tokens in ``recent``: repeat divides positive
    logits and multiplies negative ones; presence and frequency subtract."""
    if not recent:
        return logits
    out = logits.copy()
    counts = Counter(recent)
    ids = np.fromiter(counts, dtype=np.int64)
    seen = np.fromiter(counts.values(), dtype=np.float32)
    values = out[ids]
    if repeat:
        values = np.where(values > 0, values / repeat, values * repeat)
    if frequency:
        values = values - seen * frequency
    if presence:
        values = values - presence
    out[ids] = values
    return out


def apply_logit_bias(logits: np.ndarray, bias: dict[int, float]) -> np.ndarray:
    """Adds each token's bias to its logit (ids were checked against the vocabulary
    when the request was planned; any past this row are left alone)."""
    out = logits.copy()
    for token, value in bias.items():
        if token < out.size:
            out[token] += np.float32(value)
    return out


def min_p_mask(logits: np.ndarray, min_p: float) -> np.ndarray:
    """Keep tokens whose probability is at least ``min_p`` times the top one's."""
    threshold = logits.max() + math.log(min_p)
    return np.where(logits >= threshold, logits, NEG_INF)


def tail_free_mask(logits: np.ndarray, z: float) -> np.ndarray:
    """Tail-free sampling: cut where the curvature of the sorted probabilities has
    accumulated ``z`` of its mass (llama.cpp's algorithm, keeping at least one).

    Sorting the whole vocabulary costs milliseconds a token, so only a head of the
    most likely tokens is sorted (``TFS_CANDIDATES``); the curvature of the rest is at
    most twice the smallest probability sorted, and while that bound could move the
    cut, a longer head is tried, then the whole vocabulary. The result is the exact one."""
    probs_all = _softmax(logits)
    if probs_all.size < 3:
        return logits
    for k in (*TFS_CANDIDATES, probs_all.size):
        candidates = _top(probs_all, k)
        cut = _tail_free_cut(probs_all[candidates], z, partial=candidates.size < probs_all.size)
        if cut is not None:
            break
    if cut is None or cut >= probs_all.size:
        return logits
    out = np.full_like(logits, NEG_INF)
    out[candidates[:cut]] = logits[candidates[:cut]]
    return out


def _tail_free_cut(probs: np.ndarray, z: float, *, partial: bool) -> int | None:
    """How many of the sorted ``probs`` to keep; None when ``probs`` is only the head
    of the distribution and the unseen tail's curvature could change the answer."""
    curvature = np.abs(np.diff(probs, n=2))
    known = curvature.sum()
    unseen = 2.0 * float(probs[-2]) if partial else 0.0  # Σ|Δ²p| over a falling tail ≤ 2·its first p
    if known + unseen <= 0:  # a flat distribution: nothing to cut
        return None if partial else probs.size
    cumulative = np.cumsum(curvature)
    low = np.nonzero(cumulative > z * known)[0]
    if not partial:
        return int(low[0]) + 1 if low.size else probs.size
    high = np.nonzero(cumulative > z * (known + unseen))[0]
    if low.size and high.size and low[0] == high[0]:
        return int(low[0]) + 1
    return None


class Mirostat:
    """Mirostat 1 and 2 (Basu et al.): a target surprise ``tau`` steered by ``eta``."""

    def __init__(self, version: int, tau: float, eta: float, temperature: float, seed: int | None) -> None:
        self.version = version
        self.tau = tau
        self.eta = eta
        self.temperature = temperature
        self.mu = 2.0 * tau
        self.rng = np.random.default_rng(seed)

    def choose(self, logits: np.ndarray) -> int:
        probs_all = _softmax(logits / self.temperature)
        if self.version == 1:
            head = probs_all[_top(probs_all, MIROSTAT1_M)]
            keep = self._v1_k(head, probs_all.size)
            order = _top(probs_all, keep)
        else:
            # Only tokens under the surprise ceiling ``mu`` are kept: sort just those.
            ceiling = -np.log2(np.maximum(probs_all, 1e-30)) <= self.mu
            order = np.flatnonzero(ceiling)
            order = order[np.argsort(-probs_all[order])] if order.size else _top(probs_all, 1)
            keep = order.size
        probs = probs_all[order]
        kept = probs[:keep] / probs[:keep].sum()
        pick = int(self.rng.choice(keep, p=kept))
        surprise = -math.log2(max(float(kept[pick]), 1e-30))
        self.mu -= self.eta * (surprise - self.tau)
        return int(order[pick])

    def _v1_k(self, top: np.ndarray, n: int) -> int:
        """``top``: the largest probabilities, sorted; ``n``: the vocabulary size."""
        i = np.arange(top.size - 1, dtype=np.float64)
        t = np.log((i + 2) / (i + 1))
        b = np.log(np.maximum(top[:-1], 1e-30) / np.maximum(top[1:], 1e-30))
        s_hat = float((t * b).sum() / max((t * t).sum(), 1e-30))
        eps = s_hat - 1
        try:
            k = ((eps * 2**self.mu) / (1 - n ** (-eps))) ** (1 / s_hat)
        except (OverflowError, ZeroDivisionError):
            k = n
        return int(min(max(k if math.isfinite(k) else n, 1), n))


class LogitsProcessor:
    """The worker's per-request pipeline; ``process`` returns the row to sample from
    and, with mirostat, the token it chose (every other token then masked)."""

    def __init__(self, processing: Processing) -> None:
        self.p = processing
        self.mirostat = (
            Mirostat(processing.mirostat, processing.mirostat_tau, processing.mirostat_eta,
                     processing.temperature, processing.seed)
            if processing.mirostat
            else None
        )  # fmt: skip

    def process(self, logits: np.ndarray, sequence: Sequence[int] | np.ndarray) -> tuple[np.ndarray, int | None]:
        p = self.p
        if p.logit_bias:  # first, as llama.cpp applies it before penalties and samplers
            logits = apply_logit_bias(logits, p.logit_bias)
        if p.repeat_penalty or p.presence_penalty or p.frequency_penalty:
            window = p.repeat_last_n or DEFAULT_PENALTY_WINDOW
            logits = apply_penalties(
                logits, list(sequence[-window:]), repeat=p.repeat_penalty,
                presence=p.presence_penalty, frequency=p.frequency_penalty,
            )  # fmt: skip
        if p.tfs_z:
            logits = tail_free_mask(logits, p.tfs_z)
        if p.min_p:
            logits = min_p_mask(logits, p.min_p)
        if self.mirostat is None:
            return logits, None
        token = self.mirostat.choose(logits)
        forced = np.full_like(logits, NEG_INF)
        forced[token] = 0.0
        return forced, token


def log_softmax(logits: np.ndarray) -> np.ndarray:
    shifted = logits.astype(np.float64) - logits.max()
    return shifted - np.log(np.exp(shifted).sum())


def _top(values: np.ndarray, k: int) -> np.ndarray:
    """Indices of the ``k`` largest ``values``, largest first, without sorting the rest."""
    if k >= values.size:
        return np.argsort(-values)
    head = np.argpartition(-values, k - 1)[:k]
    return head[np.argsort(-values[head])]


def _softmax(logits: np.ndarray) -> np.ndarray:
    shifted = np.exp(logits.astype(np.float64) - logits.max())
    return shifted / shifted.sum()
