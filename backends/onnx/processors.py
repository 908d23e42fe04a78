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

from backends.onnx.protocol import Processing
from backends.onnx.sampling import DEFAULT_PENALTY_WINDOW

NEG_INF = np.float32(-np.inf)


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


def min_p_mask(logits: np.ndarray, min_p: float) -> np.ndarray:
    """Keep tokens whose probability is at least ``min_p`` times the top one's."""
    threshold = logits.max() + math.log(min_p)
    return np.where(logits >= threshold, logits, NEG_INF)


def tail_free_mask(logits: np.ndarray, z: float) -> np.ndarray:
    """Tail-free sampling: cut where the curvature of the sorted probabilities has
    accumulated ``z`` of its mass (llama.cpp's algorithm, keeping at least one)."""
    order = np.argsort(-logits)
    probs = _softmax(logits[order])
    if probs.size < 3:
        return logits
    curvature = np.abs(np.diff(probs, n=2))
    total = curvature.sum()
    if total <= 0:
        return logits
    cumulative = np.cumsum(curvature / total)
    over = np.nonzero(cumulative > z)[0]
    keep = int(over[0]) + 1 if over.size else probs.size
    out = np.full_like(logits, NEG_INF)
    out[order[:keep]] = logits[order[:keep]]
    return out


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
        order = np.argsort(-logits)
        probs = _softmax(logits[order] / self.temperature)
        if self.version == 1:
            keep = self._v1_k(probs)
        else:
            keep = max(1, int(np.count_nonzero(-np.log2(np.maximum(probs, 1e-30)) <= self.mu)))
        kept = probs[:keep] / probs[:keep].sum()
        pick = int(self.rng.choice(keep, p=kept))
        surprise = -math.log2(max(float(kept[pick]), 1e-30))
        self.mu -= self.eta * (surprise - self.tau)
        return int(order[pick])

    def _v1_k(self, probs: np.ndarray, m: int = 100) -> int:
        top = probs[: min(m, probs.size)]
        i = np.arange(top.size - 1, dtype=np.float64)
        t = np.log((i + 2) / (i + 1))
        b = np.log(np.maximum(top[:-1], 1e-30) / np.maximum(top[1:], 1e-30))
        s_hat = float((t * b).sum() / max((t * t).sum(), 1e-30))
        eps = s_hat - 1
        n = probs.size
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

    def process(self, logits: np.ndarray, sequence: Sequence[int]) -> tuple[np.ndarray, int | None]:
        p = self.p
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


def _softmax(logits: np.ndarray) -> np.ndarray:
    shifted = np.exp(logits.astype(np.float64) - logits.max())
    return shifted / shifted.sum()
