"""The batch engine's rows on the real model, driven step by step: a generation whose
consumer stopped reading is left out of the decode passes (not computed with the
others), and resumes where it was once credited: with the tokens it gets alone, up to a
near tie that kernel rounding may tip (tests/support/greedy.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from dragoman.backends.onnx.worker.batch_engine import MAX_CHUNK, PARK_AFTER, BatchEngine
from dragoman.backends.onnx.worker.decoder import Decoder
from dragoman.backends.onnx.worker.prefix_cache import PrefixCache
from dragoman.backends.onnx.prompt_tokens import PromptTokenizer
from dragoman.backends.onnx.worker_protocol import RUN_AHEAD, Done, Start, Tokens
from dragoman.backends.onnx.worker.sampler import Sampler
from dragoman.backends.onnx.worker.sequence import Sequence
from dragoman.backends.text.segments import Segment
from tests.support.greedy import Step, agreed

og = pytest.importorskip("onnxruntime_genai", reason="the cpu extra installs onnxruntime-genai")

NEW_TOKENS = 3 * RUN_AHEAD


class Rig:
    """The real decoder, its passes' row counts recorded."""

    def __init__(self, model_dir: Path) -> None:
        self.decoder = Decoder(model_dir)
        self.rows: list[int] = []
        decode = self.decoder.decode

        def counted(slab: Any, tokens: np.ndarray, lengths: np.ndarray) -> np.ndarray:
            self.rows.append(len(tokens))
            return decode(slab, tokens, lengths)

        self.decoder.decode = counted  # type: ignore[method-assign]
        self.logits: list[np.ndarray] | None = None  # while set, each pass's logits of row 0 (one sequence alone)
        decode_counted = self.decoder.decode

        def recorded(slab: Any, tokens: np.ndarray, lengths: np.ndarray) -> np.ndarray:
            logits = decode_counted(slab, tokens, lengths)
            if self.logits is not None:
                self.logits.append(logits[0])
            return logits

        self.decoder.decode = recorded  # type: ignore[method-assign]
        self.chunks: list[int] = []
        prefill = self.decoder.prefill

        def chunked(slab: Any, row: int, tokens: np.ndarray, start: int) -> np.ndarray:
            self.chunks.append(len(tokens))
            logits = prefill(slab, row, tokens, start)
            if self.logits is not None:  # the first token comes from the last chunk's
                self.logits[:] = [logits]
            return logits

        self.decoder.prefill = chunked  # type: ignore[method-assign]
        self.tokenizer = og.Tokenizer(og.Config(str(model_dir)))
        self.prompts = PromptTokenizer(model_dir, None)

    def sequence(self, request_id: int, text: str) -> Sequence:
        prompt = self.prompts.encode([Segment(f"<|im_start|>user\n{text}<|im_end|>\n<|im_start|>assistant\n", special=True)])
        start = Start(request_id=request_id, prompt=[], context_length=2048, max_new_tokens=NEW_TOKENS)
        layout = self.decoder.layout
        return Sequence(
            start, prompt, len(prompt) + NEW_TOKENS, sampler=Sampler(start.search, layout.search_defaults, self.decoder.vocab_size, prompt),
            processor=None, guide=None, tokenizer=self.tokenizer, eos_ids=frozenset(layout.eos_token_ids), token_bytes=None,
        )  # fmt: skip


def run(engine: BatchEngine, credited: set[int], tokens: dict[int, list[int]]) -> bool:
    """One step; the consumers of ``credited`` read everything at once. True while any
    generation is still going."""
    for sequence, report in engine.step():
        if isinstance(report, Tokens):
            tokens.setdefault(report.request_id, []).extend(report.token_ids)
        assert not isinstance(report, Done) or report.reason in ("stop", "length"), report
    for sequence in engine.sequences():
        if sequence.request_id in credited:
            sequence.consumed = sequence.completion_tokens
    return engine.active


QUESTIONS = ["Write a long story about a dragon.", "Tell me about the sea.", "Count from one to fifty.", "Describe a city."]


def test_a_reader_that_stopped_is_left_out_of_the_passes_and_resumes_as_alone(model_dir: Path) -> None:
    rig = Rig(model_dir)
    alone: dict[int, list[int]] = {}
    reference: dict[int, list[Step]] = {}
    for i, question in enumerate(QUESTIONS):
        engine = BatchEngine(rig.decoder, PrefixCache(0, 1), 2048)
        engine.admit(rig.sequence(i, question))
        rig.logits = []
        while run(engine, {i}, alone):
            pass
        top = [np.argsort(logits)[::-1][:2] for logits in rig.logits[: len(alone[i])]]
        assert [int(t[0]) for t in top] == alone[i]  # greedy: each token the best of its pass's logits
        reference[i] = [Step(str(t[0]), tuple((str(k), float(logits[k])) for k in t)) for t, logits in zip(top, rig.logits, strict=False)]
        rig.logits = None
    assert all(len(alone[i]) > RUN_AHEAD for i in range(len(QUESTIONS))), alone  # long enough to stall

    engine = BatchEngine(rig.decoder, PrefixCache(0, 1), 2048)
    for i, question in enumerate(QUESTIONS):
        engine.admit(rig.sequence(i, question))
    together: dict[int, list[int]] = {}
    while len(engine.decoding) < len(QUESTIONS):
        run(engine, {0, 1, 2, 3}, together)
    # Readers 0 and 2 stop reading: their generations run RUN_AHEAD tokens ahead, then wait.
    reading = {1, 3}
    rig.rows.clear()
    for _ in range(RUN_AHEAD + PARK_AFTER + 4):
        run(engine, reading, together)
    assert rig.rows[-4:] == [2, 2, 2, 2], rig.rows  # only the two that are read, every pass
    # Nobody reads: a new prompt is prefilled at full chunks, not in the share of decode
    # steps it gets beside generations that run.
    for _ in range(RUN_AHEAD):
        run(engine, set(), together)
    rig.chunks.clear()
    engine.admit(rig.sequence(9, " ".join(QUESTIONS * 12)))
    while engine.prefilling:
        run(engine, set(), together)
    assert rig.chunks[:-1] == [MAX_CHUNK] * (len(rig.chunks) - 1) and len(rig.chunks) > 3, rig.chunks
    engine.cancel(9)
    together.pop(9)
    # They read again: every generation ends with the tokens it gets alone.
    while run(engine, {0, 1, 2, 3}, together):
        pass
    assert together.keys() == alone.keys()
    assert sum(agreed(reference[i], [str(t) for t in together[i]]) for i in alone) > len(QUESTIONS) * RUN_AHEAD
