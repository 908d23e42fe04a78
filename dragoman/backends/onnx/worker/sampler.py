"""Choosing the next token from logits, as the library's Generator does, in numpy.

The batch engine runs the model without the library's Generator, so the search
options of :class:`Search` are applied here with the Generator's meaning: a repetition
penalty over every token of the sequence (prompt included, HF style: positive logits
divided, negative multiplied); greedy is the arg-max; sampling keeps the ``top_k`` most
likely (the model's ``genai_config.json`` default when unset, 50 for SmolLM2), divides
by ``temperature``, keeps the smallest head whose probability reaches ``top_p``, and
draws with a generator seeded by ``random_seed`` (the same seed gives the same text;
not the library's random stream, so not the library's text for a seed).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from dragoman.backends.onnx.worker_protocol import Search


class Sampler:
    def __init__(self, search: Search, defaults: dict[str, Any], vocab_size: int, prompt: np.ndarray) -> None:
        def pick(name: str, fallback: Any) -> Any:
            value = getattr(search, name)
            return defaults.get(name, fallback) if value is None else value

        self.greedy = not search.do_sample
        self.temperature = float(pick("temperature", 1.0)) or 1.0
        top_k = int(pick("top_k", 0) or 0)
        self.top_k = top_k if 0 < top_k < vocab_size else 0
        self.top_p = float(pick("top_p", 1.0))
        penalty = float(pick("repetition_penalty", 1.0))
        self.penalty = penalty if penalty != 1.0 else None
        self.rng = np.random.default_rng(search.random_seed)
        self.seen: np.ndarray | None = None
        if self.penalty is not None:
            self.seen = np.zeros(vocab_size, dtype=bool)
            self.seen[prompt[(prompt >= 0) & (prompt < vocab_size)]] = True

    def choose(self, logits: np.ndarray) -> int:
        """The next token from one row of logits (masked entries are ``-inf``)."""
        if self.seen is not None:
            logits = _penalised(logits, self.seen, self.penalty)  # type: ignore[arg-type]
        if np.isnan(logits).any():  # a degenerate knob (a zero penalty on -inf): never chosen
            logits = np.where(np.isnan(logits), np.float32(-np.inf), logits)
        if self.greedy:
            return int(np.argmax(logits))
        if self.top_k:
            candidates = np.argpartition(-logits, self.top_k - 1)[: self.top_k]
        else:
            candidates = np.flatnonzero(np.isfinite(logits))
            if not candidates.size:
                return int(np.argmax(logits))
        with np.errstate(over="ignore", invalid="ignore"):
            scaled = logits[candidates].astype(np.float64) / self.temperature
        scaled = np.where(np.isnan(scaled), -np.inf, scaled)
        order = np.argsort(-scaled, kind="stable")
        candidates, scaled = candidates[order], scaled[order]
        if not np.isfinite(scaled[0]):
            # Nothing allowed, or a temperature so small that the best token's logit
            # overflows: that is the greedy choice.
            return int(candidates[0])
        probs = np.exp(scaled - scaled[0])
        probs /= probs.sum()
        if self.top_p < 1.0:
            keep = int(np.searchsorted(np.cumsum(probs), self.top_p)) + 1
            candidates, probs = candidates[:keep], probs[:keep] / probs[:keep].sum()
        return int(candidates[self.rng.choice(len(candidates), p=probs)])

    def accept(self, token: int) -> None:
        if self.seen is not None and 0 <= token < len(self.seen):
            self.seen[token] = True


def _penalised(logits: np.ndarray, seen: np.ndarray, penalty: float) -> np.ndarray:
    out = logits.copy()
    values = out[seen]
    out[seen] = np.where(values < 0, values * penalty, values / penalty)
    return out
