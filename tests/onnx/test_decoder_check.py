"""The batch engine's load-time check on the real model (issue 23): it accepts kernel
rounding of the size measured on AVX2 (bench/kernel_rounding.py: up to 0.027 of the
logits' spread between a one-row and a several-row pass) and refuses what is really
broken — a row reading another row's KV, a position one off — on any CPU."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from dragoman.backends.onnx.worker.decoder import ROUNDING_BOUND, Decoder, Unsupported, divergence, self_check

MEASURED_ROUNDING = 0.027  # the largest divergence bench/kernel_rounding.py measured (AVX2)


@pytest.fixture(scope="module")
def decoder(model_dir: Path) -> Decoder:
    return Decoder(model_dir)


def tampered(decoder: Decoder, change: Any) -> Decoder:
    """``decoder`` whose batched decodes (more than one row) go through ``change``."""
    plain = Decoder.decode.__get__(decoder)

    def decode(slab: Any, tokens: np.ndarray, lengths: np.ndarray) -> np.ndarray:
        return change(plain, slab, tokens, lengths) if len(tokens) > 1 else plain(slab, tokens, lengths)

    decoder.decode = decode  # type: ignore[method-assign]
    return decoder


def test_the_model_passes_with_exact_chunks_and_batches_within_rounding(decoder: Decoder) -> None:
    figures = self_check(decoder)
    assert figures.chunked_kv_exact and figures.chunked == 0.0  # chunks of 2 and 3 tokens: the KV of one pass
    assert figures.batched <= MEASURED_ROUNDING
    assert min(figures.broken.values()) > 2 * ROUNDING_BOUND, figures  # the check tells a broken layout apart


def test_rounding_of_the_measured_size_is_accepted(decoder: Decoder) -> None:
    rng = np.random.default_rng(7)

    def rounded(plain: Any, slab: Any, tokens: np.ndarray, lengths: np.ndarray) -> np.ndarray:
        logits = plain(slab, tokens, lengths)
        spread = logits.max(axis=1, keepdims=True) - logits.min(axis=1, keepdims=True)
        noise = rng.uniform(-1, 1, logits.shape).astype(np.float32)
        return logits + noise / np.abs(noise).max() * MEASURED_ROUNDING * spread

    try:
        figures = self_check(tampered(decoder, rounded))
    finally:
        del decoder.decode
    assert MEASURED_ROUNDING / 2 < figures.batched <= ROUNDING_BOUND


def swapped(plain: Any, slab: Any, tokens: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Rows 0 and 1 each read the other's KV."""
    slab.swap(0, 1, slab.capacity)
    try:
        return plain(slab, tokens, lengths)
    finally:
        slab.swap(0, 1, slab.capacity)


@pytest.mark.parametrize(
    ("name", "wrong"),
    [
        ("another row's KV", lambda plain, slab, tokens, lengths: swapped(plain, slab, tokens, lengths)),
        ("a position one on", lambda plain, slab, tokens, lengths: plain(slab, tokens, lengths + (np.arange(len(lengths)) == 0))),
        ("a position one back", lambda plain, slab, tokens, lengths: plain(slab, tokens, lengths - (np.arange(len(lengths)) == 0))),
    ],
)  # fmt: skip
def test_a_batch_that_reads_the_wrong_layout_is_refused(decoder: Decoder, name: str, wrong: Any) -> None:
    """Batched rows that get another row's logits or whose first row's mask is one
    position off: the engine falls back, and the message says by how much."""
    try:
        with pytest.raises(Unsupported, match=rf"a row decoded in a batch differs from one plain pass by 0\.\d+ .*{ROUNDING_BOUND:g}"):
            self_check(tampered(decoder, wrong))
    finally:
        del decoder.decode


def test_a_decoder_that_ignores_the_mask_is_refused(decoder: Decoder) -> None:
    """A mask one too long reads as the right one (lengths past the check's prompt are
    cut): a check that could not see a wrong mask is no check, and such a decoder could
    not batch rows of different lengths."""

    def deaf(plain: Any, slab: Any, tokens: np.ndarray, lengths: np.ndarray) -> np.ndarray:
        return plain(slab, tokens, np.minimum(lengths, 5))

    try:
        with pytest.raises(Unsupported, match=r"the mask one too long changes a row's logits by only 0\.0"):
            self_check(tampered(decoder, deaf))
    finally:
        del decoder.decode


def test_divergence_is_scale_free() -> None:
    expected = np.linspace(-10, 30, 1000, dtype=np.float32)
    got = expected + 0.4 * (np.arange(1000) % 2)
    assert divergence(expected, got) == pytest.approx(0.01, rel=1e-4)
    assert divergence(3 * expected, 3 * got) == pytest.approx(0.01, rel=1e-4)
