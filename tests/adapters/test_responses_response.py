"""Canonical results and events → Responses objects and the typed SSE stream."""

from __future__ import annotations

import json
import re
from typing import Any

import msgspec
import pytest

from dragoman.adapters.aggregate import ChatResult, ResultBuilder
from dragoman.adapters.canonical import (
    ContentDelta,
    ErrorEvent,
    Event,
    Finish,
    RoleStart,
    ThinkingDelta,
    ToolCall,
    ToolCallDone,
    ToolCallFragment,
    Usage,
)
from dragoman.adapters.errors import BackendError, ContextTooLong, Overloaded
from dragoman.adapters.responses import StreamEncoder, build_response, encode_response, error_code, meta_for, wire
from dragoman.adapters.responses.ids import encode_reasoning
from tests.support.sse import named_events

USAGE = Usage(prompt_tokens=7, completion_tokens=3)
WEATHER = ToolCall(name="get_weather", arguments={"city": "Paris"}, id="call_a")
RESPONSE_ID = re.compile(r"resp_[0-9a-f]{48}")


def meta(**fields: Any) -> Any:
    body = {"model": "m", "input": "hi"} | fields
    return meta_for(msgspec.json.decode(msgspec.json.encode(body), type=wire.ResponsesRequest), store=True)


def whole(result: ChatResult, **fields: Any) -> dict[str, Any]:
    return json.loads(encode_response(build_response(result, meta(**fields))))


def events(stream: list[Event], **fields: Any) -> list[dict[str, Any]]:
    encoder = StreamEncoder(meta(**fields))
    return [data for _, data in named_events((b"".join(encoder.encode(e) for e in stream) + encoder.close()).decode())]


def kinds(stream: list[Event], **fields: Any) -> list[str]:
    return [e["type"] for e in events(stream, **fields)]


# -- whole objects ---------------------------------------------------------------------


def test_text_response_object() -> None:
    got = whole(ChatResult(content="Hello", usage=USAGE), instructions="Be brief.", temperature=0.2, metadata={"k": "v"})
    assert RESPONSE_ID.fullmatch(got["id"]) and got["object"] == "response" and got["status"] == "completed"
    (message,) = got["output"]
    assert message["type"] == "message" and message["role"] == "assistant" and message["status"] == "completed"
    assert message["content"] == [{"type": "output_text", "text": "Hello", "annotations": [], "logprobs": []}]
    assert got["usage"] == {"input_tokens": 7, "output_tokens": 3, "total_tokens": 10,
                            "input_tokens_details": {"cached_tokens": 0}, "output_tokens_details": {"reasoning_tokens": 0}}  # fmt: skip
    assert (got["instructions"], got["temperature"], got["metadata"], got["model"]) == ("Be brief.", 0.2, {"k": "v"}, "m")
    assert got["text"] == {"format": {"type": "text"}} and got["error"] is None and got["incomplete_details"] is None


def test_calls_and_reasoning_items() -> None:
    got = whole(ChatResult(thinking="t", tool_calls=[WEATHER], finish_reason="tool_calls"), include=["reasoning.encrypted_content"])
    reasoning, call = got["output"]
    assert reasoning["type"] == "reasoning" and reasoning["summary"] == []
    assert reasoning["content"] == [{"type": "reasoning_text", "text": "t"}] and reasoning["encrypted_content"] == encode_reasoning("t")
    assert (call["type"], call["call_id"], call["name"], json.loads(call["arguments"])) == (
        "function_call", "call_a", "get_weather", {"city": "Paris"},
    )  # fmt: skip
    assert call["id"].startswith("fc_")


def test_encrypted_content_only_when_included() -> None:
    assert "encrypted_content" not in whole(ChatResult(thinking="t", content="a"))["output"][0]


def test_length_is_incomplete() -> None:
    got = whole(ChatResult(content="cut", finish_reason="length"))
    assert got["status"] == "incomplete" and got["incomplete_details"] == {"reason": "max_output_tokens"}


def test_tools_and_choice_are_echoed_as_sent() -> None:
    tools = [{"type": "function", "name": "f", "parameters": {"type": "object"}, "strict": True}, {"type": "web_search"}]
    got = whole(ChatResult(content="a"), tools=tools, tool_choice="auto", parallel_tool_calls=False)
    assert got["tools"] == tools and got["tool_choice"] == "auto" and got["parallel_tool_calls"] is False


@pytest.mark.parametrize(("err", "code"), [
    (ContextTooLong("n", prompt_tokens=5, context_length=2), "context_length_exceeded"),
    (Overloaded("busy"), "server_is_overloaded"),
    (BackendError("down"), "server_error"),
])  # fmt: skip
def test_error_codes(err: Any, code: str) -> None:
    assert error_code(err) == code


# -- the stream ------------------------------------------------------------------------

HEAD = ["response.created", "response.in_progress"]
MESSAGE = ["response.output_item.added", "response.content_part.added", "response.output_text.delta",
           "response.output_text.done", "response.content_part.done", "response.output_item.done"]  # fmt: skip
REASONING = ["response.output_item.added", "response.content_part.added", "response.reasoning_text.delta",
             "response.reasoning_text.done", "response.content_part.done", "response.output_item.done"]  # fmt: skip
CALL = ["response.output_item.added", "response.function_call_arguments.delta",
        "response.function_call_arguments.done", "response.output_item.done"]  # fmt: skip
FINISH = Finish(usage=USAGE)

SEQUENCES: list[tuple[str, list[Event], list[str]]] = [
    ("text", [RoleStart(), ContentDelta("Hi"), FINISH], HEAD + MESSAGE + ["response.completed"]),
    ("nothing", [RoleStart(), FINISH], HEAD + ["response.completed"]),
    ("thinking, text, a call", [ThinkingDelta("t"), ContentDelta("a"), ToolCallDone(WEATHER), FINISH],
     HEAD + REASONING + MESSAGE + CALL + ["response.completed"]),
    ("fragments of two calls", [
        ToolCallFragment(index=0, id="call_x", name="a", arguments='{"q'),
        ToolCallFragment(index=0, arguments='": 1}'),
        ToolCallFragment(index=1, id="call_y", name="b", arguments="{}"),
        FINISH,
    ], HEAD + CALL[:2] + ["response.function_call_arguments.delta"] + CALL[2:] + CALL + ["response.completed"]),
    ("length", [ContentDelta("a"), Finish(reason="length")], HEAD + MESSAGE + ["response.incomplete"]),
    ("failure mid-stream", [ContentDelta("a"), ErrorEvent("boom", status=502), ContentDelta("late")],
     HEAD + MESSAGE[:3] + ["response.failed"]),
]  # fmt: skip


@pytest.mark.parametrize(("name", "stream", "want"), SEQUENCES, ids=[s[0] for s in SEQUENCES])
def test_event_sequence(name: str, stream: list[Event], want: list[str]) -> None:
    got = events(stream)
    assert [e["type"] for e in got] == want
    assert [e["sequence_number"] for e in got] == list(range(len(got)))


def test_stream_details() -> None:
    got = events([ThinkingDelta("2+"), ThinkingDelta("2"), ContentDelta("4"), ContentDelta("!"), ToolCallDone(WEATHER), FINISH])
    created = got[0]["response"]
    assert created["status"] == "in_progress" and created["output"] == [] and created["usage"] is None
    added = [e for e in got if e["type"] == "response.output_item.added"]
    assert [(e["output_index"], e["item"]["type"], e["item"]["status"]) for e in added] == [
        (0, "reasoning", "in_progress"), (1, "message", "in_progress"), (2, "function_call", "in_progress"),
    ]  # fmt: skip
    assert added[1]["item"]["content"] == [] and added[2]["item"]["arguments"] == ""
    text_deltas = [(e["item_id"], e["delta"]) for e in got if e["type"] == "response.output_text.delta"]
    assert [d for _, d in text_deltas] == ["4", "!"] and {i for i, _ in text_deltas} == {added[1]["item"]["id"]}
    done = {e["type"]: e for e in got if e["type"].endswith(".done") and e["type"] != "response.output_item.done"}
    assert done["response.reasoning_text.done"]["text"] == "2+2"
    assert done["response.output_text.done"]["text"] == "4!"
    assert done["response.function_call_arguments.done"]["name"] == "get_weather"
    final = got[-1]["response"]
    assert final["id"] == created["id"] and final["status"] == "completed" and final["usage"]["total_tokens"] == 10
    items = [e["item"] for e in got if e["type"] == "response.output_item.done"]
    assert final["output"] == items  # the last event holds every item as it was finished


def test_failed_response_keeps_what_was_produced() -> None:
    got = events([ContentDelta("partial"), ErrorEvent("upstream died", status=502)])
    failed = got[-1]["response"]
    assert failed["status"] == "failed" and failed["error"] == {"code": "server_error", "message": "upstream died"}
    assert failed["output"][0]["status"] == "incomplete" and failed["output"][0]["content"][0]["text"] == "partial"


def test_encoder_final_is_the_last_object() -> None:
    encoder = StreamEncoder(meta())
    encoder.encode(ContentDelta("x"))
    assert encoder.final is None
    encoder.encode(FINISH)
    assert encoder.final is not None and encoder.final.status == "completed" and encoder.encode(ContentDelta("y")) == b""


def test_stream_and_whole_agree() -> None:
    stream: list[Event] = [RoleStart(), ThinkingDelta("t"), ContentDelta("a"), ToolCallFragment(index=0, id="c1", name="f", arguments="{}"), FINISH]
    builder = ResultBuilder()
    for event in stream:
        builder.add(event)
    body = whole(builder.result())
    final = events(stream)[-1]["response"]

    def shape(items: list[dict[str, Any]]) -> list[Any]:
        return [{k: v for k, v in item.items() if k != "id"} for item in items]

    assert shape(body["output"]) == shape(final["output"]) and body["status"] == final["status"]
