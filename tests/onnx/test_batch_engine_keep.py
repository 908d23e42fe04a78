"""The batch engine caches a prompt's KV after the step that sends its first token, not
before it (the copy of a long prompt cost its time to first token), and never loses it:
every change to the rows keeps the pending copies first. On the real model, in process."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from dragoman.backends.onnx.worker.batch_engine import BatchEngine
from dragoman.backends.onnx.worker.decoder import Decoder
from dragoman.backends.onnx.worker.prefix_cache import PrefixCache
from dragoman.backends.onnx.worker_protocol import Done, Start, Tokens
from dragoman.backends.onnx.worker.sampler import Sampler
from dragoman.backends.onnx.worker.sequence import Sequence

PROMPT = np.arange(1000, 1090, dtype=np.int32)  # 90 ordinary tokens: a prefill of two chunks


@pytest.fixture(scope="module")
def parts(model_dir: Path) -> Iterator[tuple[Decoder, object]]:
    import onnxruntime_genai as og

    decoder = Decoder(model_dir)
    yield decoder, og.Tokenizer(og.Model(str(model_dir)))


def sequence(parts: tuple[Decoder, object], request_id: int, prompt: np.ndarray, new_tokens: int) -> Sequence:
    decoder, tokenizer = parts
    start = Start(request_id=request_id, prompt=[], context_length=512, max_new_tokens=new_tokens)
    return Sequence(
        start, prompt, len(prompt) + new_tokens,
        sampler=Sampler(start.search, decoder.layout.search_defaults, decoder.vocab_size, prompt),
        processor=None, guide=None, tokenizer=tokenizer, eos_ids=frozenset(), token_bytes=None,
    )  # fmt: skip


def first_token_step(engine: BatchEngine, request_id: int) -> None:
    for _ in range(10):
        if any(isinstance(r, Tokens) and r.request_id == request_id for _, r in engine.step()):
            return
    raise AssertionError("no first token in 10 steps")


def test_a_prompt_is_cached_after_its_first_token_has_gone_out(parts: tuple[Decoder, object]) -> None:
    engine = BatchEngine(parts[0], PrefixCache(64 << 20, 8), 512)
    engine.admit(sequence(parts, 1, PROMPT, 8))
    first_token_step(engine, 1)
    assert len(engine.cache) == 0 and engine.runnable  # the copy is pending, not skipped
    engine.step()
    assert engine.cache.covers(PROMPT)


def test_a_prompt_arriving_before_the_copy_still_reuses_it(parts: tuple[Decoder, object]) -> None:
    engine = BatchEngine(parts[0], PrefixCache(64 << 20, 8), 512)
    engine.admit(sequence(parts, 1, PROMPT, 8))
    first_token_step(engine, 1)
    longer = sequence(parts, 2, np.concatenate([PROMPT, np.arange(2000, 2010, dtype=np.int32)]), 4)
    engine.admit(longer)  # no step in between
    assert longer.reused == len(PROMPT)


@pytest.mark.parametrize("how", ["finished on its first token", "cancelled after its first token"])
def test_the_pending_copy_survives_the_row_going_away(parts: tuple[Decoder, object], how: str) -> None:
    engine = BatchEngine(parts[0], PrefixCache(64 << 20, 8), 512)
    if how == "finished on its first token":
        engine.admit(sequence(parts, 1, PROMPT, 1))
        reports = [r for _ in range(3) for _, r in engine.step()]
        assert any(isinstance(r, Done) for r in reports)
    else:
        engine.admit(sequence(parts, 1, PROMPT, 8))
        first_token_step(engine, 1)
        assert engine.cancel(1) is not None
    assert not engine.active  # the slab is released: the copy was taken before
    assert engine.cache.covers(PROMPT)
    entry, shared = engine.cache.longest(PROMPT)
    assert entry is not None and shared == len(PROMPT)
    # The cached KV is the prompt's: a cold prefill in a fresh engine gives the same.
    cold = BatchEngine(parts[0], PrefixCache(0, 0), 512)
    cold.admit(sequence(parts, 2, PROMPT, 8))
    first_token_step(cold, 2)
    assert np.array_equal(cold.slab.read(0, len(PROMPT)), entry.kv)


def run_until_idle(engine: BatchEngine) -> list[object]:
    reports = []
    for _ in range(50):
        if not engine.runnable:
            return reports
        reports += [r for _, r in engine.step()]
    raise AssertionError("the engine did not go idle in 50 steps")


def test_a_finished_reply_is_warmed_up_into_the_cache_exactly(parts: tuple[Decoder, object]) -> None:
    engine = BatchEngine(parts[0], PrefixCache(64 << 20, 8), 512)
    replied = sequence(parts, 1, PROMPT, 12)
    engine.admit(replied)
    reports = run_until_idle(engine)
    assert sum(len(r.token_ids) for r in reports if isinstance(r, Tokens)) == 12
    assert all(getattr(r, "request_id", 1) == 1 for r in reports)  # the warm-up reports nothing
    assert not engine.active  # and then the slab is released
    conversation = replied.ids[: replied.length]
    entry, shared = engine.cache.longest(conversation)
    assert entry is not None and shared == len(conversation) and len(engine.cache) == 1  # the prompt's entry is covered
    # Its KV is a prefill's, as a cold start of the next turn would compute it.
    cold = BatchEngine(parts[0], PrefixCache(0, 0), 512)
    cold.admit(sequence(parts, 2, np.concatenate([conversation, [3000, 3001]]).astype(np.int32), 2))
    first_token_step(cold, 2)
    assert np.array_equal(cold.slab.read(0, len(conversation)), entry.kv)
    # The next turn continues from the whole reply.
    turn = sequence(parts, 3, np.concatenate([conversation, np.arange(2000, 2020)]).astype(np.int32), 2)
    engine.admit(turn)
    assert turn.reused == len(conversation)


def test_no_warm_up_while_others_run_or_without_a_cache(parts: tuple[Decoder, object]) -> None:
    uncached = BatchEngine(parts[0], PrefixCache(0, 0), 512)
    uncached.admit(sequence(parts, 1, PROMPT, 4))
    run_until_idle(uncached)
    assert not uncached.active and len(uncached.cache) == 0
    engine = BatchEngine(parts[0], PrefixCache(64 << 20, 8), 512)
    engine.admit(sequence(parts, 1, PROMPT, 4))
    engine.admit(sequence(parts, 2, np.arange(3000, 3060, dtype=np.int32), 40))
    for _ in range(100):  # until the short reply is done, while the long one still generates
        engine.step()
        if engine.find(1) is None:
            break
    assert engine.find(1) is None and engine.find(2) is not None
    assert not any(s.warm for s in engine.sequences())


def test_another_conversation_stops_a_warm_up_and_the_next_turn_continues_it(parts: tuple[Decoder, object]) -> None:
    engine = BatchEngine(parts[0], PrefixCache(64 << 20, 8), 512)
    for other in (True, False):
        replied = sequence(parts, 1, PROMPT + other, 100)
        engine.admit(replied)
        for _ in range(150):
            if engine.find(1) is None:
                break
            replied.consumed = replied.completion_tokens  # a client that keeps reading
            engine.step()
        # The reply's warm-up began in the step that ended it: one chunk of 64 is done.
        (warm,) = engine.prefilling
        assert warm.warm and warm.pending == 100 - 64
        conversation = replied.ids[: replied.length]
        if other:
            stranger = sequence(parts, 2, np.arange(3000, 3050, dtype=np.int32), 2)
            engine.admit(stranger)
            assert engine.prefilling == [stranger]  # nobody waits for someone else's warm-up
            assert engine.cache.covers(conversation[: len(PROMPT) + 64])  # what it computed is kept
        else:
            turn = sequence(parts, 3, np.concatenate([conversation, np.arange(2000, 2020)]).astype(np.int32), 2)
            engine.admit(turn)
            assert warm in engine.prefilling  # its own next turn: the warm-up goes on, then serves it
            run_until_idle(engine)
            assert turn.reused == len(conversation)
        run_until_idle(engine)


def test_a_warm_up_that_fails_to_begin_costs_nothing_but_itself(
    parts: tuple[Decoder, object], monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = BatchEngine(parts[0], PrefixCache(64 << 20, 8), 512)
    admit = engine.admit

    def admit_failing_warm_ups(sequence: Sequence) -> None:
        admit(sequence)
        if sequence.warm:  # its row had no memory (Windows' commit limit, say)
            raise MemoryError

    monkeypatch.setattr(engine, "admit", admit_failing_warm_ups)
    replied = sequence(parts, 1, PROMPT, 100)
    engine.admit(replied)
    reports = []
    for _ in range(150):
        replied.consumed = replied.completion_tokens
        reports += engine.step()
        if not engine.runnable:
            break
    assert isinstance(reports[-1][1], Done)  # the reply ended, and nothing raised out of a step
    assert not engine.active and not engine.runnable
    again = sequence(parts, 2, PROMPT, 4)  # the engine still serves
    engine.admit(again)
    run_until_idle(engine)
    assert again.completion_tokens == 4
