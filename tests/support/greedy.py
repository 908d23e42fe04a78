"""Greedy answers compared as far as they agree on every CPU (issue 23).

A row decoded in a batch gets its logits alone up to kernel rounding, not bit for bit
(dragoman/backends/onnx/worker/decoder.py): on AVX2, MatMulNBits rounds a one-row pass and a pass of
several differently. bench/kernel_rounding.py measured the test model's logits moved by
at most 1.3 (0.027 of their spread). Two greedy runs can therefore part only at a step
where the reference's best two candidates are within twice that of each other, and
then the other run picks the reference's second. Before that step they agree token for
token; after it they continue different texts, and nothing more is compared.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

TIE_GAP = 3.0  # logits: 2 × 1.3 measured, rounded up


@dataclass(frozen=True)
class Step:
    """One greedy token of the reference run with its two best candidates' logprobs
    (``top_logprobs=2``; a logprob gap is the logit gap)."""

    token: str
    top: tuple[tuple[str, float], ...]


def agreed(reference: Sequence[Step], other: Sequence[str]) -> int:
    """How many leading tokens ``other`` shares with ``reference``; asserts that they
    part, if they do, only at a near tie and to the reference's second choice."""
    for i, (step, token) in enumerate(zip(reference, other, strict=False)):
        if step.token == token:
            continue
        assert len(step.top) >= 2, f"token {i}: the reference run has no second candidate (ask top_logprobs=2)"
        (_, best), (second, runner_up) = step.top[0], step.top[1]
        gap = best - runner_up
        assert gap <= TIE_GAP and token == second, (
            f"token {i}: {token!r} where the reference has {step.token!r}, ahead of {second!r} by {gap:.2f} "
            f"logits; rounding swaps only candidates within {TIE_GAP}"
        )
        return i
    if len(other) < len(reference):  # ``other`` ended (its end of sequence is no text) where the reference went on
        step = reference[len(other)]
        gap = step.top[0][1] - step.top[1][1] if len(step.top) >= 2 else float("inf")
        assert gap <= TIE_GAP, f"ended after {len(other)} of the reference's {len(reference)} tokens, at a gap of {gap:.2f}"
    else:
        assert len(other) == len(reference), f"{len(other)} tokens where the reference ended after {len(reference)}"
    return len(other)
