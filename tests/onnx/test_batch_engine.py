"""The batch engine on the real model: prefix reuse and chunked prefill give exactly the
answers of one request alone and cold; batched decode, and the library's Generator,
give them token for token up to a near tie that kernel rounding may tip
(tests/support/greedy.py: on AVX2 a batched row and the library's own session round
otherwise than this engine's row alone)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import msgspec
import pytest
import pytest_asyncio

from dragoman.adapters.canonical import (
    ChatRequest,
    CompletionRequest,
    ContentDelta,
    Finish,
    Message,
    ResponseFormat,
    SamplingOptions,
    TextPart,
    Tool,
    ToolCallDone,
    ToolChoice,
)
from dragoman.backends.onnx import OnnxBackend
from tests.onnx.conftest import MODEL_NAME, collect
from tests.support.greedy import TIE_GAP, Step, agreed

pytestmark = pytest.mark.asyncio(loop_scope="module")

WEATHER = Tool(
    name="get_weather",
    description="Current weather of a city",
    parameters={"type": "object", "properties": {"city": {"type": "string", "maxLength": 40}}, "required": ["city"]},
)
CITY = {
    "type": "object",
    "properties": {"city": {"type": "string", "maxLength": 40}},
    "required": ["city"],
    "additionalProperties": False,
}
NOTES = " ".join(f"Note {i}: the lighthouse keeper counted {i * 7} ships passing at dusk." for i in range(40))


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def engines(make_backend: Callable[..., OnnxBackend]) -> AsyncIterator[dict[str, OnnxBackend]]:
    """The default (batch engine, prefix reuse), the same without reuse, and the
    library's Generator."""
    made = {
        "batch": make_backend(context_length=2048),
        "cold": make_backend(context_length=2048, prefix_cache_mib=0),
        "generator": make_backend(context_length=2048, engine="generator"),
    }
    for backend in made.values():
        await backend.load(MODEL_NAME, None)
    yield made
    for backend in made.values():
        await backend.aclose()


def chat(messages: list[tuple[str, str]], **options: Any) -> ChatRequest:
    extra = {k: options.pop(k) for k in list(options) if k not in SamplingOptions.__struct_fields__}
    return ChatRequest(
        model=MODEL_NAME,
        messages=[Message(role=role, parts=[TextPart(text)]) for role, text in messages],  # type: ignore[arg-type]
        options=SamplingOptions(**options),
        **extra,
    )


class Answer(msgspec.Struct):
    text: str
    calls: list[Any]
    reason: str
    completion_tokens: int
    logprobs: list[tuple[str, float]]
    steps: list[Step]


def with_ties(request: Any) -> Any:
    """``request`` asking for each token's two best candidates, which tell a near tie
    (a request that asked for more keeps its own)."""
    return msgspec.structs.replace(request, logprobs=True, top_logprobs=max(2, request.top_logprobs))


async def answer(backend: OnnxBackend, request: ChatRequest) -> Answer:
    return answer_of(await collect(backend.chat(with_ties(request))))


def answer_of(events: list[Any]) -> Answer:
    finish = events[-1]
    assert isinstance(finish, Finish), finish
    deltas = [e for e in events if isinstance(e, ContentDelta)]
    tokens = [t for e in deltas for t in (e.logprobs or [])]
    return Answer(
        "".join(e.text for e in deltas),
        [(e.call.name, e.call.arguments) for e in events if isinstance(e, ToolCallDone)],
        finish.reason,
        finish.usage.completion_tokens,
        [(t.token, t.logprob) for t in tokens],
        [Step(t.token, tuple((c.token, c.logprob) for c in t.top_logprobs)) for t in tokens],
    )


def same(got: Answer, expected: Answer, *, count: bool = True, rounded: bool = False, sampled: bool = False) -> None:
    """``got`` is ``expected``. Both alone on this engine, with or without reused KV:
    exactly (a prefill's KV is the same however it is chunked, on every CPU).
    ``rounded`` (batched against alone, or against the library's own session): token for
    token, or up to a near tie where it takes the second candidate (then the rest is
    another text). ``sampled`` and ``rounded``: the first token comes from the request's
    own prefill, so with the same seed it is the same; after it rounding can tip a draw
    anywhere, so nothing more is compared."""
    if sampled:
        assert got.steps[0].token == expected.steps[0].token
        return
    if rounded and agreed(expected.steps, [s.token for s in got.steps]) < len(expected.steps):
        return
    assert (got.text, got.calls, got.reason) == (expected.text, expected.calls, expected.reason)
    if count:
        assert got.completion_tokens == expected.completion_tokens
    assert [t for t, _ in got.logprobs] == [t for t, _ in expected.logprobs]
    tolerance = TIE_GAP if rounded else 1e-3  # a logprob moves by at most twice the largest logit's change
    assert all(abs(x - y) <= tolerance for (_, x), (_, y) in zip(got.logprobs, expected.logprobs, strict=True))


REQUESTS = {
    "greedy": chat([("user", "Write a long story about a dragon.")], num_predict=40),
    "stop": chat([("user", "What is the capital of France?")], num_predict=16, stop=["is Par"]),
    "schema": chat([("user", "Name a city in JSON.")], num_predict=30,
                   response_format=ResponseFormat(type="json_schema", schema=CITY)),
    "tool": chat([("user", "What's the weather in Paris?")], num_predict=40, tools=[WEATHER],
                 tool_choice=ToolChoice(mode="required")),
    "logprobs": chat([("user", "Name three colours.")], num_predict=8, logprobs=True, top_logprobs=2),
    "seeded": chat([("user", "Tell me about cats.")], num_predict=12, temperature=0.9, seed=11),
    "penalties": chat([("user", "Tell me about dogs.")], num_predict=12, repeat_penalty=1.3, repeat_last_n=16,
                      presence_penalty=0.4),
}  # fmt: skip


async def test_the_batch_engine_answers_as_the_library_generator(engines: dict[str, OnnxBackend]) -> None:
    for name, request in REQUESTS.items():
        if name in ("seeded",):  # a seed gives this engine's random stream, not the library's
            continue
        got, expected = await answer(engines["batch"], request), await answer(engines["generator"], request)
        # Once a grammar is complete the library generates one more token (its end of
        # sequence) and counts it; the batch engine stops there.
        same(got, expected, count=name not in ("schema", "tool"), rounded=True)
    assert engines["batch"].slot.worker.ready.engine == "batch"  # type: ignore[union-attr]
    assert engines["generator"].slot.worker.ready.engine == "generator"  # type: ignore[union-attr]


async def test_concurrent_requests_answer_as_each_alone(engines: dict[str, OnnxBackend]) -> None:
    batch = engines["batch"]
    alone = {name: await answer(batch, request) for name, request in REQUESTS.items()}
    together = await asyncio.gather(*(answer(batch, request) for request in REQUESTS.values()))
    for name, got in zip(REQUESTS, together, strict=True):
        same(got, alone[name], rounded=True, sampled=name == "seeded")
    assert alone["seeded"].text and alone["schema"].text.startswith("{")


async def test_next_turns_reuse_the_prefix_and_answer_as_cold(engines: dict[str, OnnxBackend]) -> None:
    batch, cold = engines["batch"], engines["cold"]
    history = [("system", "You are a helpful assistant. " + NOTES[:600])]
    reused = batch.counters["cached_tokens"]
    for question in ("What did the keeper count?", "Say it in one sentence.", "And what about note 3?"):
        history.append(("user", question))
        request = chat(history, num_predict=24, tools=[WEATHER])  # tools are in every prompt, as agents send them
        got, expected = await answer(batch, request), await answer(cold, request)
        same(got, expected)
        history.append(("assistant", got.text))
    assert batch.counters["cached_tokens"] - reused > 300  # the system prompt and tools were not computed again
    assert cold.counters["cached_tokens"] == 0


async def test_a_changed_system_prompt_and_interleaved_conversations(engines: dict[str, OnnxBackend]) -> None:
    batch, cold = engines["batch"], engines["cold"]
    conversations = {
        "pirate": [("system", "You are a pirate. " + NOTES[:300])],
        "poet": [("system", "You are a poet. " + NOTES[:300])],
    }
    for question in ("Who are you?", "What do you like?"):
        for history in conversations.values():  # a1 b1 a2 b2: each turn follows the other conversation's
            history.append(("user", question))
            request = chat(history, num_predict=20)
            got, expected = await answer(batch, request), await answer(cold, request)
            same(got, expected)
            history.append(("assistant", got.text))


async def test_a_long_prompt_is_prefilled_between_the_others_steps(engines: dict[str, OnnxBackend]) -> None:
    batch, cold = engines["batch"], engines["cold"]
    streams = [chat([("user", f"Count from one to fifty in words. ({i})")], num_predict=60) for i in range(2)]
    long = chat([("user", NOTES + " How many notes are there?")], num_predict=8)
    expected = [await answer(cold, r) for r in [*streams, long]]
    arrivals: list[list[float]] = [[], []]

    async def stream(i: int) -> Answer:
        events = []
        async for event in batch.chat(with_ties(streams[i])):
            if isinstance(event, ContentDelta):
                arrivals[i].append(time.monotonic())
            events.append(event)
        return answer_of(events)

    tasks = [asyncio.create_task(stream(i)) for i in range(2)]
    while not all(arrivals):
        await asyncio.sleep(0.01)
    sent = time.monotonic()
    long_events, first = [], None
    async for event in batch.chat(with_ties(long)):
        if isinstance(event, ContentDelta) and first is None:
            first = time.monotonic()
        long_events.append(event)
    got = [*(await asyncio.gather(*tasks)), answer_of(long_events)]
    for g, e in zip(got, expected, strict=True):
        same(g, e, rounded=True)
    assert first is not None
    during = [t for times in arrivals for t in times if sent < t < first]
    assert len(during) >= 4, "the other streams stopped while the long prompt was prefilled"


def raw(prompt: str, **options: Any) -> CompletionRequest:
    return CompletionRequest(model=MODEL_NAME, prompt=prompt, raw=True, options=SamplingOptions(num_predict=12, **options))


async def test_prompts_against_what_is_cached_answer_as_cold(engines: dict[str, OnnxBackend]) -> None:
    """Raw prompts whose tokens are the client's: one that differs from a cached one
    only in its last token, one that is a strict prefix of a cached one (the entry holds
    more than the prompt), the same prompt again, and prompts of one or two tokens."""
    batch, cold = engines["batch"], engines["cold"]
    base = f"{time.time_ns()} {NOTES[:1200]}"
    prompts = [
        base + " The count was 7",
        base + " The count was 8",  # the last token differs
        base[:700],  # a strict prefix of both
        base[:700],  # again: all of it cached
        base[:300],
        base[:1],  # a single token that cached entries start with
        " ",
    ]
    usage = []
    for prompt in prompts:
        request = with_ties(raw(prompt))
        got, expected = await collect(batch.complete(request)), await collect(cold.complete(request))
        same(answer_of(got), answer_of(expected))
        usage.append(got[-1].usage)  # type: ignore[union-attr]
    # All but the last two tokens (computed again, as a prefill computes them) came from
    # the cache, whether the entry held one token more or many more than the prompt.
    assert [u.cached_tokens for u in usage[1:5]] == [u.prompt_tokens - 2 for u in usage[1:5]], usage
    assert usage[0].cached_tokens == usage[5].cached_tokens == usage[6].cached_tokens == 0, usage
