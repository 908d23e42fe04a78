"""Stream encoders and upstream decoders under arbitrary event sequences and lines.

Encoders: every SSE event is ``data: <json>\\n\\n`` and the stream ends with
``data: [DONE]\\n\\n``; every NDJSON line is a JSON object ending in ``\\n``; no exception;
the text a client reassembles is exactly the text the backend produced. Decoders: no
line, however malformed, raises; at most one terminal event, and it comes last.
"""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dragoman.adapters import ollama, openai
from dragoman.adapters.canonical import (
    ContentDelta,
    ErrorEvent,
    Event,
    Finish,
    Logprobs,
    RoleStart,
    ThinkingDelta,
    TokenLogprob,
    ToolCallDone,
    ToolCallFragment,
    TopLogprob,
)
from dragoman.adapters.ollama.wire import UpstreamChatResponse
from dragoman.adapters.openai.wire import UpstreamReply
from tests.fuzz.frames import ndjson_lines, sse_payloads
from tests.fuzz.strategies import any_events, json_values, replies, shaped, texts

FUZZ = settings(
    max_examples=150, deadline=None, database=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow]
)


def openai_stream(events: list[Event], *, include_usage: bool) -> bytes:
    encoder = openai.StreamEncoder("m", include_usage=include_usage)
    return b"".join(encoder.encode(event) for event in events) + encoder.close()


def texts_of(events: list[Event], kind: type[ContentDelta] | type[ThinkingDelta]) -> str:
    return "".join(e.text for e in events if isinstance(e, kind))


def is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


# -- OpenAI SSE ------------------------------------------------------------------------------


@FUZZ
@given(events=replies, include_usage=st.booleans())
def test_openai_stream_is_well_framed_and_loses_no_text(events: list[Event], include_usage: bool) -> None:
    payloads = sse_payloads(openai_stream(events, include_usage=include_usage))
    chunks = [p for p in payloads if "error" not in p]
    errors = [p for p in payloads if "error" in p]
    deltas = [c["choices"][0]["delta"] for c in chunks if c["choices"]]

    assert "".join(d.get("content") or "" for d in deltas) == texts_of(events, ContentDelta)
    assert "".join(d.get("reasoning_content") or "" for d in deltas) == texts_of(events, ThinkingDelta)
    assert not events or deltas[0] == {"role": "assistant", "content": ""}
    assert len({c["id"] for c in chunks}) == (1 if events else 0)

    encoder = openai.StreamEncoder("m")
    for event in events:
        frame = encoder.encode(event)
        if isinstance(event, ToolCallDone):  # a whole call goes out whole, arguments as JSON text
            (call,) = sse_payloads(frame + b"data: [DONE]\n\n")[-1]["choices"][0]["delta"]["tool_calls"]
            assert call["function"]["name"] == event.call.name
            assert json.loads(call["function"]["arguments"]) == event.call.arguments
            assert call["id"] == (event.call.id or call["id"]) and call["type"] == "function"

    for chunk in chunks:
        for choice in chunk["choices"]:
            for token in (choice.get("logprobs") or {}).get("content", []):
                assert is_number(token["logprob"]), token
                assert all(is_number(top["logprob"]) for top in token["top_logprobs"]), token

    finish = events[-1] if events and isinstance(events[-1], (Finish, ErrorEvent)) else None
    reasons = [c["choices"][0]["finish_reason"] for c in chunks if c["choices"] and c["choices"][0]["finish_reason"]]
    if isinstance(finish, Finish):
        assert reasons and reasons[-1] in ("stop", "length", "tool_calls") and len(reasons) == 1
        assert chunks[-1]["choices"] == [] if include_usage else chunks[-1]["choices"][0]["finish_reason"]
    else:
        assert reasons == []
    if isinstance(finish, ErrorEvent):
        assert len(errors) == 1 and payloads[-1] is errors[0]
        assert set(errors[0]["error"]) == {"message", "type", "param", "code"}
        assert errors[0]["error"]["message"] == finish.message
    else:
        assert errors == []


@FUZZ
@given(events=st.lists(any_events, max_size=20), include_usage=st.booleans())
def test_openai_stream_survives_any_event_order(events: list[Event], include_usage: bool) -> None:
    payloads = sse_payloads(openai_stream(events, include_usage=include_usage))
    deltas = [p["choices"][0]["delta"] for p in payloads if "error" not in p and p["choices"]]
    assert "".join(d.get("content") or "" for d in deltas) == texts_of(events, ContentDelta)


# -- Ollama NDJSON ---------------------------------------------------------------------------


def ollama_run(events: list[Event]) -> tuple[list[dict[str, Any]], int | None]:
    """The lines written, and the index of the event whose line was an error (if any)."""
    encoder = ollama.StreamEncoder("m")
    written, failed_at = b"", None
    for i, event in enumerate(events):
        frame = encoder.encode(event)
        if failed_at is None and b'{"error":' in frame:
            failed_at = i
        written += frame
    return ndjson_lines(written + encoder.close()), failed_at


@FUZZ
@given(events=replies)
def test_ollama_stream_is_well_framed_and_loses_no_text(events: list[Event]) -> None:
    lines, failed_at = ollama_run(events)
    produced = events if failed_at is None else events[:failed_at]
    chunks = [line for line in lines if "error" not in line]

    assert "".join(c["message"]["content"] for c in chunks) == texts_of(produced, ContentDelta)
    assert "".join(c["message"].get("thinking", "") for c in chunks) == texts_of(produced, ThinkingDelta)
    for chunk in chunks:
        assert chunk["model"] == "m" and chunk["message"]["role"] == "assistant"
        for call in chunk["message"].get("tool_calls", ()):
            assert isinstance(call["function"]["arguments"], dict)
        for token in chunk.get("logprobs") or ():
            assert is_number(token["logprob"]), token
            assert all(is_number(top["logprob"]) for top in token.get("top_logprobs") or ()), token
    whole = [e.call for e in produced if isinstance(e, ToolCallDone)]
    sent = [c["function"] for chunk in chunks for c in chunk["message"].get("tool_calls", ())]
    assert [(c.name, c.arguments) for c in whole] == [
        (s["name"], s["arguments"]) for s, origin in zip(sent, _call_origins(produced)) if origin == "whole"
    ]

    done = [i for i, line in enumerate(lines) if line.get("done")]
    if failed_at is not None:
        assert "error" in lines[-1] and isinstance(lines[-1]["error"], str) and set(lines[-1]) == {"error"}
        assert isinstance(events[failed_at], (ErrorEvent, ToolCallFragment, Finish))
        assert done == []
    elif events and isinstance(events[-1], Finish):
        assert done == [len(lines) - 1]
        assert lines[-1]["done_reason"] in ("stop", "length", "load", "unload")
        assert lines[-1]["eval_count"] == events[-1].usage.completion_tokens
    else:
        assert done == []
    assert sum("error" in line for line in lines) == (failed_at is not None)


def _call_origins(events: list[Event]) -> list[str]:
    """Whether each call line the encoder writes came from a whole call or from fragments,
    in the order it writes them (fragment calls close when a later index starts)."""
    origins, open_indices = [], set()
    for event in events:
        if isinstance(event, ToolCallDone):
            origins.append("whole")
        elif isinstance(event, ToolCallFragment):
            closed = {i for i in open_indices if i < event.index}
            origins += ["fragments"] * len(closed)
            open_indices = (open_indices - closed) | {event.index}
        elif isinstance(event, Finish):
            origins += ["fragments"] * len(open_indices)
            open_indices = set()
    return origins


@FUZZ
@given(events=st.lists(any_events, max_size=20))
def test_ollama_stream_survives_any_event_order(events: list[Event]) -> None:
    lines, failed_at = ollama_run(events)
    if failed_at is not None:
        assert "error" in lines[-1]


# -- upstream decoders ------------------------------------------------------------------------

openai_lines = st.one_of(
    st.binary(max_size=40),
    texts.map(str.encode),
    shaped(UpstreamReply, corrupt=True).map(lambda b: b"data: " + json.dumps(b).encode()),
    shaped(UpstreamReply, corrupt=False).map(lambda b: b"data:" + json.dumps(b).encode()),
    shaped(UpstreamReply, corrupt=False).map(lambda b: json.dumps(b).encode()),
    json_values.map(lambda v: b"data: " + json.dumps(v).encode()),
    st.sampled_from([b"data: [DONE]", b"", b": keep-alive", b"event: error", b"data: ", b"data: {", b"retry: 10"]),
)
ollama_lines = st.one_of(
    st.binary(max_size=40),
    texts.map(str.encode),
    shaped(UpstreamChatResponse, corrupt=True).map(lambda b: json.dumps(b).encode()),
    shaped(UpstreamChatResponse, corrupt=False).map(lambda b: json.dumps(b).encode()),
    json_values.map(lambda v: json.dumps(v).encode()),
    st.sampled_from([b"", b"{", b'{"done": true}', b'{"error": "boom", "status": 503}']),
)


def check_decoded(events: list[Event]) -> None:
    terminal = [i for i, e in enumerate(events) if isinstance(e, (Finish, ErrorEvent))]
    assert len(terminal) <= 1 and (not terminal or terminal[0] == len(events) - 1), events
    body = [e for e in events if not isinstance(e, RoleStart)]
    assert all(isinstance(e, (ContentDelta, ThinkingDelta, ToolCallDone, ToolCallFragment, Logprobs, Finish, ErrorEvent)) for e in body)
    # Whatever an upstream sent, both client encoders can carry it.
    sse_payloads(openai_stream(events, include_usage=True))
    ollama_run(events)


@FUZZ
@given(lines=st.lists(openai_lines, max_size=8))
def test_openai_upstream_decoder_never_raises(lines: list[bytes]) -> None:
    decoder = openai.UpstreamStreamDecoder()
    events = [event for line in lines for event in decoder.feed(line)] + decoder.finish()
    check_decoded(events)
    assert isinstance(events[-1], (Finish, ErrorEvent))


@FUZZ
@given(lines=st.lists(ollama_lines, max_size=8))
def test_ollama_upstream_decoder_never_raises(lines: list[bytes]) -> None:
    decoder = ollama.UpstreamStreamDecoder()
    events = [event for line in lines for event in decoder.feed(line)] + decoder.finish()
    check_decoded(events)
    assert isinstance(events[-1], (Finish, ErrorEvent))


@FUZZ
@given(body=st.one_of(st.binary(max_size=60), shaped(UpstreamReply, corrupt=True).map(lambda b: json.dumps(b).encode())))
def test_openai_upstream_reply_parsers_never_raise(body: bytes) -> None:
    check_decoded(openai.parse_upstream_response(body))
    assert 400 <= openai.parse_upstream_error(502, body).status <= 599


@FUZZ
@given(body=st.one_of(st.binary(max_size=60), shaped(UpstreamChatResponse, corrupt=True).map(lambda b: json.dumps(b).encode())))
def test_ollama_upstream_reply_parsers_never_raise(body: bytes) -> None:
    check_decoded(ollama.parse_upstream_response(body))
    assert ollama.parse_upstream_error(503, body).status == 503


# -- regressions the fuzzing found ----------------------------------------------------------

# A model that rules a token out reports logprob -inf; msgspec wrote it as null, which
# breaks clients that type logprob as a number (ollama-python rejects the whole line).
RULED_OUT = Logprobs([TokenLogprob("a", float("-inf"), top_logprobs=[TopLogprob("b", float("-inf")), TopLogprob("c", float("nan"))])])
RULED_OUT_CASES = [
    ("openai", lambda: sse_payloads(openai_stream([RULED_OUT], include_usage=False))[1]["choices"][0]["logprobs"]["content"]),
    ("ollama", lambda: ollama_run([RULED_OUT])[0][0]["logprobs"]),
]


@pytest.mark.parametrize(("dialect", "tokens"), RULED_OUT_CASES, ids=[c[0] for c in RULED_OUT_CASES])
def test_ruled_out_token_has_a_number_for_logprob(dialect: str, tokens: Any) -> None:
    (token,) = tokens()
    assert token["logprob"] == -9999.0
    assert [top["logprob"] for top in token["top_logprobs"]] == [-9999.0, -9999.0]
