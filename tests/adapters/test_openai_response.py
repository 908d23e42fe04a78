"""Canonical results and events → OpenAI bodies and SSE streams (docs/api-mapping.md §1, §3, §6)."""

from __future__ import annotations

import re
import time
from typing import Any

import msgspec
import pytest

from dragoman.adapters.aggregate import ChatResult, ResultBuilder
from dragoman.adapters.canonical import (
    ContentDelta,
    ErrorEvent,
    Event,
    Finish,
    Logprobs,
    RoleStart,
    ThinkingDelta,
    TokenLogprob,
    ToolCall,
    ToolCallDone,
    ToolCallFragment,
    TopLogprob,
    Usage,
)
from dragoman.adapters.errors import BackendError, DragomanError, ModelNotFound, Overloaded, RequestError
from dragoman.adapters.openai import StreamEncoder, render_error, render_response

ID_PATTERN = re.compile(r"chatcmpl-[0-9a-f]{24}")
USAGE = Usage(prompt_tokens=7, completion_tokens=3)
USAGE_JSON = {"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10}
WEATHER = ToolCall(name="get_weather", arguments={"city": "Paris", "unit": "C"}, id="call_a")
TIME = ToolCall(name="get_time", arguments={"zone": "CET"}, id="call_b")
LOGPROB = TokenLogprob(token="Hé", logprob=-0.1, top_logprobs=[TopLogprob(token="Hé", logprob=-0.1, bytes=[72, 195, 169])])


def body(result: ChatResult, model: str = "m") -> dict[str, Any]:
    return msgspec.json.decode(render_response(result, model))


def without_id(response: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in response.items() if k not in ("id", "created")}


# -- non-streaming -----------------------------------------------------------------------

RESPONSE_CASES: list[tuple[str, ChatResult, dict[str, Any]]] = [
    ("plain text", ChatResult(content="Hello", usage=USAGE),
     {"index": 0, "message": {"role": "assistant", "content": "Hello"}, "finish_reason": "stop"}),
    ("empty reply keeps an empty string", ChatResult(),
     {"index": 0, "message": {"role": "assistant", "content": ""}, "finish_reason": "stop"}),
    # OpenAI answers null; Ollama sends "".
    ("only tool calls: content null", ChatResult(tool_calls=[WEATHER], finish_reason="tool_calls"),
     {"index": 0, "finish_reason": "tool_calls",
      "message": {"role": "assistant", "content": None, "tool_calls": [
          {"id": "call_a", "type": "function",
           "function": {"name": "get_weather", "arguments": '{"city":"Paris","unit":"C"}'}}]}}),
    ("tool calls with a normal stop finish as tool_calls", ChatResult(tool_calls=[WEATHER], finish_reason="stop"),
     {"index": 0, "finish_reason": "tool_calls",
      "message": {"role": "assistant", "content": None, "tool_calls": [
          {"id": "call_a", "type": "function",
           "function": {"name": "get_weather", "arguments": '{"city":"Paris","unit":"C"}'}}]}}),
    ("length stays length with tool calls", ChatResult(content="x", tool_calls=[TIME], finish_reason="length"),
     {"index": 0, "finish_reason": "length",
      "message": {"role": "assistant", "content": "x", "tool_calls": [
          {"id": "call_b", "type": "function", "function": {"name": "get_time", "arguments": '{"zone":"CET"}'}}]}}),
    ("thinking in both spellings", ChatResult(content="4", thinking="2+2"),
     {"index": 0, "finish_reason": "stop",
      "message": {"role": "assistant", "content": "4", "reasoning_content": "2+2", "reasoning": "2+2"}}),
    ("load is a stop", ChatResult(finish_reason="load"),
     {"index": 0, "message": {"role": "assistant", "content": ""}, "finish_reason": "stop"}),
    ("logprobs with bytes filled in", ChatResult(content="Hé", logprobs=[LOGPROB]),
     {"index": 0, "message": {"role": "assistant", "content": "Hé"}, "finish_reason": "stop",
      "logprobs": {"content": [{"token": "Hé", "logprob": -0.1, "bytes": [72, 195, 169],
                                "top_logprobs": [{"token": "Hé", "logprob": -0.1, "bytes": [72, 195, 169]}]}]}}),
]  # fmt: skip


@pytest.mark.parametrize(("name", "result", "choice"), RESPONSE_CASES, ids=[c[0] for c in RESPONSE_CASES])
def test_response_shape(name: str, result: ChatResult, choice: dict[str, Any]) -> None:
    response = body(result, model="llama3.2")
    usage = {"prompt_tokens": result.usage.prompt_tokens, "completion_tokens": result.usage.completion_tokens,
             "total_tokens": result.usage.total_tokens}  # fmt: skip
    assert without_id(response) == {
        "object": "chat.completion",
        "model": "llama3.2",
        "system_fingerprint": "fp_dragoman",
        "choices": [choice],
        "usage": usage,
    }


def test_tool_call_without_id_gets_one() -> None:
    call = body(ChatResult(tool_calls=[ToolCall(name="f")]))["choices"][0]["message"]["tool_calls"][0]
    assert re.fullmatch(r"call_[0-9a-f]{24}", call["id"])
    assert call["function"]["arguments"] == "{}"


# improve: Ollama's ids are chatcmpl-<n below 1000> and collide.
def test_two_responses_get_different_ids() -> None:
    first, second = body(ChatResult()), body(ChatResult())
    assert ID_PATTERN.fullmatch(first["id"]) and ID_PATTERN.fullmatch(second["id"])
    assert first["id"] != second["id"]
    assert StreamEncoder("m").id != StreamEncoder("m").id


def test_created_is_the_real_time() -> None:
    assert abs(body(ChatResult())["created"] - time.time()) < 5
    assert abs(StreamEncoder("m").created - time.time()) < 5


ERROR_CASES: list[tuple[str, DragomanError, dict[str, Any]]] = [
    ("bad field", RequestError("temperature: too hot", param="temperature"),
     {"message": "temperature: too hot", "type": "invalid_request_error", "param": "temperature", "code": None}),
    ("unknown model", ModelNotFound("nope"),
     {"message": "model 'nope' not found", "type": "not_found_error", "param": "model", "code": "model_not_found"}),
    ("overloaded", Overloaded("queue full", retry_after=2),
     {"message": "queue full", "type": "overloaded_error", "param": None, "code": None}),
    ("backend failure", BackendError("upstream went away"),
     {"message": "upstream went away", "type": "api_error", "param": None, "code": None}),
]  # fmt: skip


@pytest.mark.parametrize(("name", "err", "error"), ERROR_CASES, ids=[c[0] for c in ERROR_CASES])
def test_error_body(name: str, err: DragomanError, error: dict[str, Any]) -> None:
    assert msgspec.json.decode(render_error(err)) == {"error": error}
    # After streaming began the same object goes out as one SSE event.
    frame = StreamEncoder("m").error(err)
    assert frame == b"data: " + render_error(err) + b"\n\n"


# -- streaming ---------------------------------------------------------------------------


def frames(data: bytes) -> list[bytes]:
    """SSE events: every one exactly ``data: <payload>\\n\\n``."""
    assert data.endswith(b"\n\n")
    events = data[: -2].split(b"\n\n")
    assert all(e.startswith(b"data: ") and b"\n" not in e for e in events), data
    return [e[len(b"data: ") :] for e in events]


def run_stream(events: list[Event], *, include_usage: bool = False) -> tuple[list[dict[str, Any]], bytes]:
    encoder = StreamEncoder("m", include_usage=include_usage)
    raw = b"".join(encoder.encode(event) for event in events) + encoder.close()
    payloads = frames(raw)
    assert payloads[-1] == b"[DONE]"
    return [msgspec.json.decode(p) for p in payloads[:-1]], raw


def reassemble(chunks: list[dict[str, Any]]) -> dict[str, Any]:
    """What a client builds from the chunks, as the openai SDK's stream helper does."""
    message: dict[str, Any] = {"role": None, "content": "", "reasoning": "", "tool_calls": {}}
    finish, usage, logprobs = None, None, []
    for chunk in chunks:
        usage = chunk.get("usage", usage)
        for choice in chunk["choices"]:
            delta = choice["delta"]
            message["role"] = delta.get("role", message["role"])
            message["content"] += delta.get("content") or ""
            message["reasoning"] += delta.get("reasoning_content") or ""
            for call in delta.get("tool_calls", []):
                slot = message["tool_calls"].setdefault(call["index"], {"id": None, "name": "", "arguments": ""})
                slot["id"] = call.get("id", slot["id"])
                slot["name"] += call.get("function", {}).get("name") or ""
                slot["arguments"] += call.get("function", {}).get("arguments") or ""
            logprobs += (choice.get("logprobs") or {}).get("content", [])
            finish = choice["finish_reason"] or finish
    message["tool_calls"] = [message["tool_calls"][i] for i in sorted(message["tool_calls"])]
    return {"message": message, "finish_reason": finish, "usage": usage, "logprobs": logprobs or None}


def from_response(response: dict[str, Any]) -> dict[str, Any]:
    """The same view of a non-streaming body, to compare with :func:`reassemble`."""
    choice = response["choices"][0]
    message = choice["message"]
    calls = [{"id": c["id"], "name": c["function"]["name"], "arguments": c["function"]["arguments"]}
             for c in message.get("tool_calls", [])]  # fmt: skip
    return {
        "message": {"role": message["role"], "content": message["content"] or "",
                    "reasoning": message.get("reasoning_content", ""), "tool_calls": calls},
        "finish_reason": choice["finish_reason"],
        "usage": response["usage"],
        "logprobs": (choice.get("logprobs") or {}).get("content"),
    }  # fmt: skip


FINISH = Finish(reason="stop", usage=USAGE)

STREAM_CASES: list[tuple[str, list[Event]]] = [
    ("text", [RoleStart(), ContentDelta("Hel"), ContentDelta("lo"), FINISH]),
    ("no role event from the backend", [ContentDelta("Hi"), FINISH]),
    ("thinking then text", [RoleStart(), ThinkingDelta("2+"), ThinkingDelta("2"), ContentDelta("4"), FINISH]),
    ("one whole tool call", [RoleStart(), ToolCallDone(WEATHER), FINISH]),
    # Ollama numbered parallel calls 0, 0 in streams.
    ("parallel whole calls the backend numbered alike",
     [RoleStart(), ToolCallDone(WEATHER), ToolCallDone(msgspec.structs.replace(TIME, index=0)), FINISH]),
    ("fragmented calls", [
        RoleStart(),
        ToolCallFragment(index=0, id="call_a", name="get_weather", arguments=""),
        ToolCallFragment(index=0, arguments='{"city":'),
        ToolCallFragment(index=0, arguments='"Paris"}'),
        ToolCallFragment(index=1, id="call_b", name="get_time", arguments='{"zone":"CET"}'),
        FINISH]),
    ("text and a call", [RoleStart(), ContentDelta("Let me look."), ToolCallDone(TIME), FINISH]),
    ("truncated", [RoleStart(), ContentDelta("abc"), Finish(reason="length", usage=USAGE)]),
    ("logprobs", [RoleStart(), ContentDelta("Hé"), Logprobs([LOGPROB]), FINISH]),
    ("logprobs with their text", [RoleStart(), ContentDelta("Hé", [LOGPROB]), ContentDelta("!", [LOGPROB]), FINISH]),
    ("empty deltas", [RoleStart(), ContentDelta(""), ThinkingDelta(""), FINISH]),
]  # fmt: skip


@pytest.mark.parametrize(("name", "events"), STREAM_CASES, ids=[c[0] for c in STREAM_CASES])
@pytest.mark.parametrize("include_usage", [False, True], ids=["plain", "include_usage"])
def test_stream_equals_non_stream(name: str, events: list[Event], include_usage: bool) -> None:
    chunks, _ = run_stream(events, include_usage=include_usage)
    builder = ResultBuilder()
    for event in events:
        builder.add(event)
    expected = from_response(body(builder.result()))
    if not include_usage:
        expected["usage"] = None
    assert reassemble(chunks) == expected


@pytest.mark.parametrize(("name", "events"), STREAM_CASES, ids=[c[0] for c in STREAM_CASES])
def test_stream_framing(name: str, events: list[Event]) -> None:
    chunks, _ = run_stream(events, include_usage=True)
    assert len({c["id"] for c in chunks}) == 1 and ID_PATTERN.fullmatch(chunks[0]["id"])
    assert len({c["created"] for c in chunks}) == 1
    assert {c["object"] for c in chunks} == {"chat.completion.chunk"}
    assert chunks[0]["choices"] == [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}]
    *body_chunks, final, usage = chunks
    assert final["choices"][0]["delta"] == {} and final["choices"][0]["finish_reason"] is not None
    assert all(c["choices"][0]["finish_reason"] is None for c in body_chunks)
    assert usage["choices"] == [] and usage["usage"] == USAGE_JSON
    assert all("usage" not in c for c in chunks[:-1])


def test_stream_without_include_usage_has_no_usage_chunk() -> None:
    chunks, _ = run_stream([RoleStart(), ContentDelta("x"), FINISH])
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"
    assert all("usage" not in c and c["choices"] for c in chunks)


def test_exact_text_stream() -> None:
    encoder = StreamEncoder("llama3.2")
    raw = b"".join(encoder.encode(e) for e in [RoleStart(), ContentDelta("Hi"), FINISH]) + encoder.close()
    head = f'{{"id":"{encoder.id}","object":"chat.completion.chunk","created":{encoder.created},' \
           '"model":"llama3.2","system_fingerprint":"fp_dragoman","choices":'  # fmt: skip
    assert raw.decode() == (
        f'data: {head}[{{"index":0,"delta":{{"role":"assistant","content":""}},"finish_reason":null}}]}}\n\n'
        f'data: {head}[{{"index":0,"delta":{{"content":"Hi"}},"finish_reason":null}}]}}\n\n'
        f'data: {head}[{{"index":0,"delta":{{}},"finish_reason":"stop"}}]}}\n\n'
        "data: [DONE]\n\n"
    )


def test_logprobs_go_out_on_the_chunk_of_their_text() -> None:
    encoder = StreamEncoder("m")
    raw = encoder.encode(ContentDelta("a", [TokenLogprob("a", -0.5, [97])]))
    head = f'{{"id":"{encoder.id}","object":"chat.completion.chunk","created":{encoder.created},' \
           '"model":"m","system_fingerprint":"fp_dragoman","choices":'  # fmt: skip
    assert raw.decode().split("\n\n")[1] == (
        f'data: {head}[{{"index":0,"delta":{{"content":"a"}},"finish_reason":null,'
        '"logprobs":{"content":[{"token":"a","logprob":-0.5,"bytes":[97],"top_logprobs":[]}]}}]}'
    )


def tool_deltas(events: list[Event]) -> list[dict[str, Any]]:
    chunks, _ = run_stream(events)
    return [call for c in chunks for call in c["choices"][0]["delta"].get("tool_calls", [])]


def test_parallel_whole_calls_have_stable_indices_and_full_first_deltas() -> None:
    deltas = tool_deltas([ToolCallDone(WEATHER), ToolCallDone(msgspec.structs.replace(TIME, index=0)), FINISH])
    assert deltas == [
        {"index": 0, "id": "call_a", "type": "function",
         "function": {"name": "get_weather", "arguments": '{"city":"Paris","unit":"C"}'}},
        {"index": 1, "id": "call_b", "type": "function", "function": {"name": "get_time", "arguments": '{"zone":"CET"}'}},
    ]  # fmt: skip


def test_fragments_keep_their_index_and_only_the_first_carries_id_and_name() -> None:
    deltas = tool_deltas([
        ToolCallFragment(index=3, id="call_x", name="f", arguments=""),
        ToolCallFragment(index=3, arguments='{"a":'),
        ToolCallFragment(index=3, arguments="1}"),
        ToolCallFragment(index=4, name="g", arguments="{}"),
        FINISH,
    ])  # fmt: skip
    assert deltas[0] == {"index": 0, "id": "call_x", "type": "function", "function": {"name": "f", "arguments": ""}}
    assert deltas[1:3] == [{"index": 0, "function": {"arguments": '{"a":'}}, {"index": 0, "function": {"arguments": "1}"}}]
    assert deltas[3]["index"] == 1 and deltas[3]["id"].startswith("call_") and deltas[3]["type"] == "function"


def test_fragment_name_arriving_late_is_sent_once() -> None:
    deltas = tool_deltas([
        ToolCallFragment(index=0, id="call_x"),
        ToolCallFragment(index=0, name="f", arguments="{"),
        ToolCallFragment(index=0, name="f", arguments="}"),
        FINISH,
    ])  # fmt: skip
    assert [d["function"].get("name") for d in deltas] == ["", "f", None]


def test_error_mid_stream_is_an_sse_event_then_done() -> None:
    encoder = StreamEncoder("m")
    raw = encoder.encode(ContentDelta("par")) + encoder.encode(ErrorEvent("backend crashed", status=502)) + encoder.close()
    payloads = frames(raw)
    assert msgspec.json.decode(payloads[-2]) == {
        "error": {"message": "backend crashed", "type": "api_error", "param": None, "code": None}
    }
    assert payloads[-1] == b"[DONE]"


def test_stream_media_type() -> None:
    assert StreamEncoder("m").media_type == "text/event-stream"
