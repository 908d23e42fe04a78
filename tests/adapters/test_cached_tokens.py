"""Prompt-cache hits and writes (canonical ``Usage.cached_tokens`` and
``cache_write_tokens``, both parts of ``prompt_tokens``) in each dialect's own fields, out
of the renderers and in from the upstream parsers, whole and streamed, and from an
upstream of one dialect to a client of another.

Anthropic's ``input_tokens`` leave out the cache reads and writes; OpenAI's
``prompt_tokens`` and the Responses ``input_tokens`` count the cached tokens in (and
OpenRouter's cache writes too); Ollama has no cache fields: its prompt count is the
whole prompt."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest

from dragoman.adapters import anthropic, ollama, openai, responses
from dragoman.adapters.aggregate import ChatResult
from dragoman.adapters.anthropic import upstream_reply as anthropic_upstream
from dragoman.adapters.canonical import ContentDelta, Event, Finish, RoleStart, Usage
from dragoman.adapters.openai import completions
from dragoman.adapters.responses import upstream_reply as responses_upstream
from tests.support.sse import named_events

HIT = Usage(prompt_tokens=40, completion_tokens=3, cached_tokens=32)
MISS = Usage(prompt_tokens=40, completion_tokens=3, cached_tokens=0)
UNKNOWN = Usage(prompt_tokens=40, completion_tokens=3)  # a backend that cannot tell
WRITE = Usage(prompt_tokens=40, completion_tokens=3, cached_tokens=20, cache_write_tokens=12)  # an upstream's read and write


def openai_chunks(raw: bytes) -> list[Any]:
    return [json.loads(e[6:]) for e in raw.split(b"\n\n") if e.startswith(b"data: {")]


def openai_stream(usage: Usage, include_usage: bool = True) -> list[Any]:
    encoder = openai.StreamEncoder("m", include_usage=include_usage)
    return openai_chunks(b"".join(encoder.encode(e) for e in [RoleStart(), ContentDelta("hi"), Finish(usage=usage)]))


# -- OpenAI chat and completions: usage.prompt_tokens_details.cached_tokens -------------

OPENAI_CASES: list[tuple[str, Usage, dict[str, Any]]] = [
    ("a hit", HIT, {"prompt_tokens": 40, "completion_tokens": 3, "total_tokens": 43, "prompt_tokens_details": {"cached_tokens": 32}}),
    ("a known miss", MISS, {"prompt_tokens": 40, "completion_tokens": 3, "total_tokens": 43, "prompt_tokens_details": {"cached_tokens": 0}}),
    # no claim where the backend does not know (Ollama's own OpenAI endpoint sends none either)
    ("unknown", UNKNOWN, {"prompt_tokens": 40, "completion_tokens": 3, "total_tokens": 43}),
    # OpenAI has no field for writes: they are prompt tokens, counted in prompt_tokens
    ("a read and a write", WRITE, {"prompt_tokens": 40, "completion_tokens": 3, "total_tokens": 43, "prompt_tokens_details": {"cached_tokens": 20}}),
]  # fmt: skip


@pytest.mark.parametrize(("name", "usage", "want"), OPENAI_CASES, ids=[c[0] for c in OPENAI_CASES])
def test_openai_chat_whole_and_final_usage_chunk(name: str, usage: Usage, want: dict[str, Any]) -> None:
    assert json.loads(openai.render_response(ChatResult(content="hi", usage=usage), "m"))["usage"] == want
    *_, last = openai_stream(usage)
    assert last["choices"] == [] and last["usage"] == want
    assert all("usage" not in c for c in openai_stream(usage, include_usage=False))


@pytest.mark.parametrize(("name", "usage", "want"), OPENAI_CASES, ids=[c[0] for c in OPENAI_CASES])
def test_openai_completions_whole_and_final_usage_chunk(name: str, usage: Usage, want: dict[str, Any]) -> None:
    body = json.loads(completions.render_response([ChatResult(content="x", usage=usage)], "m", echoes=[""], top_logprobs=None))
    assert body["usage"] == want
    stream = completions.CompletionStream("m", include_usage=True)
    encoder = stream.choice(0)
    raw = b"".join(encoder.encode(e) for e in [ContentDelta("x"), Finish(usage=usage)]) + encoder.close() + stream.close()
    assert openai_chunks(raw)[-1]["usage"] == want


@pytest.mark.parametrize(("usages", "cached", "written"), [
    ([HIT, MISS], 32, None),
    ([HIT, UNKNOWN], 32, None),  # what is known is summed
    ([UNKNOWN, UNKNOWN], None, None),
    ([WRITE, HIT], 52, 12),
    ([WRITE, WRITE], 40, 24),
])  # fmt: skip
def test_several_prompts_sum_their_hits_and_writes(usages: list[Usage], cached: int | None, written: int | None) -> None:
    total = sum(usages, Usage())
    assert (total.prompt_tokens, total.completion_tokens, total.cached_tokens, total.cache_write_tokens) == (80, 6, cached, written)


# -- Responses: usage.input_tokens_details.cached_tokens ---------------------------------


def responses_meta() -> Any:
    request = msgspec.json.decode(b'{"model": "m", "input": "hi"}', type=responses.wire.ResponsesRequest)
    return responses.meta_for(request, store=False)


@pytest.mark.parametrize(("usage", "cached"), [(HIT, 32), (MISS, 0), (UNKNOWN, 0), (WRITE, 20)])
def test_responses_whole_and_completed_event(usage: Usage, cached: int) -> None:
    whole = json.loads(responses.encode_response(responses.build_response(ChatResult(content="hi", usage=usage), responses_meta())))
    want = {"input_tokens": 40, "output_tokens": 3, "total_tokens": 43,
            "input_tokens_details": {"cached_tokens": cached}, "output_tokens_details": {"reasoning_tokens": 0}}  # fmt: skip
    assert whole["usage"] == want
    encoder = responses.StreamEncoder(responses_meta())
    raw = b"".join(encoder.encode(e) for e in [RoleStart(), ContentDelta("hi"), Finish(usage=usage)]) + encoder.close()
    name, completed = named_events(raw.decode())[-1]
    assert name == "response.completed" and completed["response"]["usage"] == want


# -- Anthropic: cache_read_input_tokens and cache_creation_input_tokens, input_tokens the rest

ANTHROPIC_CASES: list[tuple[str, Usage, dict[str, int]]] = [
    ("a hit", HIT, {"input_tokens": 8, "output_tokens": 3, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 32}),
    ("a known miss", MISS, {"input_tokens": 40, "output_tokens": 3, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}),
    ("unknown", UNKNOWN, {"input_tokens": 40, "output_tokens": 3, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}),
    # neither the read nor the write counted twice: 8 + 12 + 20 is the whole prompt
    ("a read and a write", WRITE, {"input_tokens": 8, "output_tokens": 3, "cache_creation_input_tokens": 12, "cache_read_input_tokens": 20}),
    # an upstream whose figures do not add up: no negative count
    ("more cached than prompt", Usage(10, 3, 32), {"input_tokens": 0, "output_tokens": 3, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 32}),
]  # fmt: skip


@pytest.mark.parametrize(("name", "usage", "want"), ANTHROPIC_CASES, ids=[c[0] for c in ANTHROPIC_CASES])
def test_anthropic_whole_and_message_delta(name: str, usage: Usage, want: dict[str, int]) -> None:
    assert json.loads(anthropic.render_response(ChatResult(content="hi", usage=usage), "m"))["usage"] == want
    encoder = anthropic.StreamEncoder("m")
    raw = b"".join(encoder.encode(e) for e in [RoleStart(), ContentDelta("hi"), Finish(usage=usage)])
    events = dict(named_events(raw.decode()))
    # the counts are known once the prompt is read: message_delta's cumulative usage
    assert events["message_delta"]["usage"] == want


def test_anthropic_message_start_with_counts_known_before_the_reply() -> None:
    """An upstream's message_start counts go out in the client's message_start, split the same way."""
    encoder = anthropic.StreamEncoder("m")
    start = RoleStart(prompt_tokens=40, cached_tokens=20, cache_write_tokens=12)
    raw = b"".join(encoder.encode(e) for e in [start, ContentDelta("hi"), Finish(usage=WRITE)])
    events = dict(named_events(raw.decode()))
    want = {"input_tokens": 8, "output_tokens": 0, "cache_creation_input_tokens": 12, "cache_read_input_tokens": 20}
    assert events["message_start"]["message"]["usage"] == want


# -- Ollama: no cache fields; prompt_eval_count is the whole prompt ---------------------


@pytest.mark.parametrize("usage", [HIT, MISS, UNKNOWN, WRITE])
def test_ollama_counts_the_whole_prompt(usage: Usage) -> None:
    whole = json.loads(ollama.render_response(ChatResult(content="hi", usage=usage), "m"))
    last = json.loads(ollama.StreamEncoder("m").encode(Finish(usage=usage)).splitlines()[-1])
    for body in (whole, last):
        assert (body["prompt_eval_count"], body["eval_count"]) == (40, 3)
        assert not any("cache" in key for key in body)


# -- upstream parsers keep what the upstream reported ------------------------------------


def openai_upstream(usage: dict[str, Any]) -> Usage:
    body = {"choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}], "usage": usage}
    whole = openai.parse_upstream_response(json.dumps(body).encode())[-1]
    decoder = openai.UpstreamStreamDecoder()
    lines = [
        {"choices": [{"index": 0, "delta": {"role": "assistant", "content": "hi"}}]},
        {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
        {"choices": [], "usage": usage},
    ]
    streamed = [e for line in lines for e in decoder.feed(b"data: " + json.dumps(line).encode())]
    streamed += decoder.feed(b"data: [DONE]") + decoder.finish()
    finishes = [e for e in streamed if isinstance(e, Finish)]
    assert isinstance(whole, Finish) and finishes == [whole]
    return whole.usage


@pytest.mark.parametrize(("usage", "want"), [
    ({"prompt_tokens": 40, "completion_tokens": 3, "prompt_tokens_details": {"cached_tokens": 32, "audio_tokens": 0}}, HIT),
    ({"prompt_tokens": 40, "completion_tokens": 3, "prompt_tokens_details": None}, UNKNOWN),  # vLLM without the flag
    ({"prompt_tokens": 40, "completion_tokens": 3}, UNKNOWN),
    # OpenRouter's cache writes, counted in prompt_tokens as its reads are
    ({"prompt_tokens": 40, "completion_tokens": 3, "prompt_tokens_details": {"cached_tokens": 20, "cache_write_tokens": 12}}, WRITE),
])  # fmt: skip
def test_openai_upstream_usage(usage: dict[str, Any], want: Usage) -> None:
    assert openai_upstream(usage) == want


def anthropic_upstream_stream(start: dict[str, Any], delta: dict[str, Any]) -> Usage:
    message = {"id": "msg_1", "type": "message", "role": "assistant", "model": "c", "content": [], "stop_reason": None,
               "stop_sequence": None, "usage": start}  # fmt: skip
    lines = [
        {"type": "message_start", "message": message},
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "hi"}},
        {"type": "content_block_stop", "index": 0},
        {"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": None}, "usage": delta},
        {"type": "message_stop"},
    ]
    decoder = anthropic_upstream.UpstreamStreamDecoder()
    events: list[Event] = [e for line in lines for e in decoder.feed(b"data: " + json.dumps(line).encode())]
    assert isinstance(events[-1], Finish)
    return events[-1].usage


ANTHROPIC_UPSTREAM: list[tuple[str, dict[str, Any], dict[str, Any], Usage]] = [
    # the canonical count is the whole prompt: input_tokens + cache reads + cache writes
    ("a read in message_start", {"input_tokens": 8, "cache_read_input_tokens": 32, "cache_creation_input_tokens": 0, "output_tokens": 1},
     {"output_tokens": 3}, Usage(40, 3, 32, 0)),
    ("cumulative counts in message_delta win", {"input_tokens": 8, "output_tokens": 1},
     {"input_tokens": 5, "cache_read_input_tokens": 32, "cache_creation_input_tokens": 3, "output_tokens": 3}, Usage(40, 3, 32, 3)),
    ("a write is not a hit", {"input_tokens": 8, "cache_read_input_tokens": 0, "cache_creation_input_tokens": 32, "output_tokens": 1},
     {"output_tokens": 3}, Usage(40, 3, 0, 32)),
    ("a read and a write", {"input_tokens": 8, "cache_read_input_tokens": 20, "cache_creation_input_tokens": 12, "output_tokens": 1},
     {"output_tokens": 3}, WRITE),
    ("no cache fields", {"input_tokens": 40, "output_tokens": 1}, {"output_tokens": 3}, UNKNOWN),
]  # fmt: skip


@pytest.mark.parametrize(("name", "start", "delta", "want"), ANTHROPIC_UPSTREAM, ids=[c[0] for c in ANTHROPIC_UPSTREAM])
def test_anthropic_upstream_stream_usage(name: str, start: dict[str, Any], delta: dict[str, Any], want: Usage) -> None:
    assert anthropic_upstream_stream(start, delta) == want


def test_anthropic_upstream_whole_usage() -> None:
    body = {"id": "msg_1", "type": "message", "role": "assistant", "model": "c", "content": [{"type": "text", "text": "hi"}],
            "stop_reason": "end_turn", "stop_sequence": None,
            "usage": {"input_tokens": 8, "cache_read_input_tokens": 32, "cache_creation_input_tokens": 0, "output_tokens": 3}}  # fmt: skip
    finish = anthropic_upstream.parse_upstream_response(json.dumps(body).encode())[-1]
    assert isinstance(finish, Finish) and finish.usage == Usage(40, 3, 32, 0)


@pytest.mark.parametrize(("usage", "want"), [
    ({"input_tokens": 40, "output_tokens": 3, "input_tokens_details": {"cached_tokens": 32}}, HIT),
    ({"input_tokens": 40, "output_tokens": 3, "input_tokens_details": {"cached_tokens": 0}}, MISS),
    ({"input_tokens": 40, "output_tokens": 3}, UNKNOWN),
])  # fmt: skip
def test_responses_upstream_usage(usage: dict[str, Any], want: Usage) -> None:
    response = {"id": "resp_1", "status": "completed", "usage": usage,
                "output": [{"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "hi"}]}]}  # fmt: skip
    whole = responses_upstream.parse_upstream_response(json.dumps(response).encode())[-1]
    decoder = responses_upstream.UpstreamStreamDecoder()
    streamed = decoder.feed(b"data: " + json.dumps({"type": "response.completed", "response": response}).encode())
    assert isinstance(whole, Finish) and whole.usage == want
    assert [e.usage for e in streamed if isinstance(e, Finish)] == [want]
