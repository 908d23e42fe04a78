"""Canonical results and events → Anthropic bodies and named SSE events."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from dragoman.adapters.aggregate import ChatResult, ResultBuilder
from dragoman.adapters.anthropic import StreamEncoder, render_error, render_response, status_for
from dragoman.adapters.anthropic.ids import is_own_signature, thinking_signature
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
    Usage,
)
from dragoman.adapters.errors import BackendError, BackendTimeout, ContextTooLong, DragomanError, ModelNotFound, Overloaded, RequestError
from tests.support.sse import named_events

USAGE = Usage(prompt_tokens=7, completion_tokens=3)
WEATHER = ToolCall(name="get_weather", arguments={"city": "Paris"}, id="call_a")
MESSAGE_ID = re.compile(r"msg_[0-9A-Za-z]{24}")
TOOLU_ID = re.compile(r"toolu_[0-9A-Za-z]{24}")


def body(result: ChatResult) -> dict[str, Any]:
    return json.loads(render_response(result, "m"))


# -- non-streaming -----------------------------------------------------------------------

RESPONSES: list[tuple[str, ChatResult, list[dict[str, Any]], str, str | None]] = [
    ("text", ChatResult(content="Hello", usage=USAGE), [{"type": "text", "text": "Hello"}], "end_turn", None),
    ("empty reply is one empty text block", ChatResult(), [{"type": "text", "text": ""}], "end_turn", None),
    ("length is max_tokens", ChatResult(content="cut", finish_reason="length"), [{"type": "text", "text": "cut"}], "max_tokens", None),
    ("stop sequence named", ChatResult(content="a", stop_sequence="END"), [{"type": "text", "text": "a"}], "stop_sequence", "END"),
    ("upstream signature kept", ChatResult(content="4", thinking="2+2", thinking_signature="sig"),
     [{"type": "thinking", "thinking": "2+2", "signature": "sig"}, {"type": "text", "text": "4"}], "end_turn", None),
    ("a stop with calls is tool_use", ChatResult(tool_calls=[WEATHER], finish_reason="stop"),
     [{"type": "tool_use", "name": "get_weather", "input": {"city": "Paris"}}], "tool_use", None),
]  # fmt: skip


@pytest.mark.parametrize(("name", "result", "content", "reason", "sequence"), RESPONSES, ids=[r[0] for r in RESPONSES])
def test_response_body(name: str, result: ChatResult, content: list[dict[str, Any]], reason: str, sequence: str | None) -> None:
    got = body(result)
    assert MESSAGE_ID.fullmatch(got.pop("id"))
    for block in got["content"]:
        if block["type"] == "tool_use":
            assert TOOLU_ID.fullmatch(block.pop("id"))  # call_… ids become toolu_… ids
    assert got == {
        "type": "message", "role": "assistant", "model": "m", "content": content, "stop_reason": reason,
        "stop_sequence": sequence,
        "usage": {"input_tokens": result.usage.prompt_tokens, "output_tokens": result.usage.completion_tokens,
                  "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0},
    }  # fmt: skip


def test_local_thinking_gets_a_signature_of_our_own() -> None:
    block = body(ChatResult(content="4", thinking="2+2"))["content"][0]
    assert block["signature"] == thinking_signature("2+2") and is_own_signature(block["signature"])


def test_toolu_ids_are_kept() -> None:
    call = ToolCall(name="f", arguments={}, id="toolu_keepme")
    assert body(ChatResult(tool_calls=[call]))["content"][0]["id"] == "toolu_keepme"


# -- errors ------------------------------------------------------------------------------

ERRORS: list[tuple[DragomanError, int, str, str]] = [
    (RequestError("max_tokens: field required"), 400, "invalid_request_error", "max_tokens: field required"),
    (ModelNotFound("x"), 404, "not_found_error", "model 'x' not found"),
    (Overloaded("busy"), 529, "overloaded_error", "busy"),
    (BackendError("down"), 502, "api_error", "down"),
    (BackendTimeout("slow"), 504, "timeout_error", "slow"),
    (DragomanError("too big", status=413), 413, "request_too_large", "too big"),
    (DragomanError("slow down", status=429), 429, "rate_limit_error", "slow down"),
    (ContextTooLong("n/a", prompt_tokens=3000, context_length=2048), 400, "invalid_request_error",
     "prompt is too long: 3000 tokens > 2048 maximum"),
    (ContextTooLong("75 KB", prompt_tokens=4700, context_length=2048, at_least=True), 400, "invalid_request_error",
     "prompt is too long: 4700 tokens > 2048 maximum (at least 4700 tokens: 75 KB)"),
]  # fmt: skip


@pytest.mark.parametrize(("err", "status", "kind", "message"), ERRORS, ids=[e[2] + str(e[1]) for e in ERRORS])
def test_error_body(err: DragomanError, status: int, kind: str, message: str) -> None:
    assert status_for(err) == status
    assert json.loads(render_error(err)) == {"type": "error", "error": {"type": kind, "message": message}}


# -- streaming: the exact event sequence ---------------------------------------------------


def frames(events: list[Event]) -> list[tuple[str, dict[str, Any]]]:
    encoder = StreamEncoder("m")
    return named_events((b"".join(encoder.encode(e) for e in events) + encoder.close()).decode())


def names(events: list[Event]) -> list[str]:
    return [n for n, _ in frames(events)]


FINISH = Finish(usage=USAGE)
OPEN = ["message_start", "ping"]
CLOSE = ["message_delta", "message_stop"]
BLOCK = ["content_block_start", "content_block_delta", "content_block_stop"]

SEQUENCES: list[tuple[str, list[Event], list[str]]] = [
    ("text", [RoleStart(), ContentDelta("Hel"), ContentDelta("lo"), FINISH],
     OPEN + ["content_block_start", "content_block_delta", "content_block_delta", "content_block_stop"] + CLOSE),
    ("no output at all", [RoleStart(), FINISH], OPEN + CLOSE),
    ("thinking then text: the signature closes the thinking block",
     [ThinkingDelta("hm"), ContentDelta("ok"), FINISH],
     OPEN + ["content_block_start", "content_block_delta", "content_block_delta", "content_block_stop"] + BLOCK + CLOSE),
    ("a whole call", [ToolCallDone(WEATHER), FINISH], OPEN + BLOCK + CLOSE),
    ("fragments of two calls", [
        ToolCallFragment(index=0, id="call_x", name="get_weather", arguments='{"ci'),
        ToolCallFragment(index=0, arguments='ty": "Oslo"}'),
        ToolCallFragment(index=1, id="call_y", name="get_time", arguments=""),
        FINISH,
    ], OPEN + ["content_block_start", "content_block_delta", "content_block_delta", "content_block_stop"]
       + ["content_block_start", "content_block_stop"] + CLOSE),
    ("logprobs are not Anthropic's", [Logprobs([TokenLogprob("a", -0.1)]), ContentDelta("a"), FINISH], OPEN + BLOCK + CLOSE),
    ("an error mid-stream ends it", [ContentDelta("partial"), ErrorEvent("boom", status=502), FINISH, ContentDelta("x")],
     OPEN + ["content_block_start", "content_block_delta", "error"]),
]  # fmt: skip


@pytest.mark.parametrize(("name", "events", "want"), SEQUENCES, ids=[s[0] for s in SEQUENCES])
def test_event_sequence(name: str, events: list[Event], want: list[str]) -> None:
    assert names(events) == want


def test_stream_details() -> None:
    got = frames([ThinkingDelta("2+2"), ThinkingDelta("=4"), ContentDelta("4"), ToolCallDone(WEATHER), Finish(usage=USAGE)])
    message = got[0][1]["message"]
    assert MESSAGE_ID.fullmatch(message["id"]) and message["content"] == [] and message["stop_reason"] is None
    blocks = [data for name, data in got if name == "content_block_start"]
    assert [(b["index"], b["content_block"]["type"]) for b in blocks] == [(0, "thinking"), (1, "text"), (2, "tool_use")]
    assert blocks[0]["content_block"] == {"type": "thinking", "thinking": "", "signature": ""}
    assert blocks[2]["content_block"]["input"] == {} and TOOLU_ID.fullmatch(blocks[2]["content_block"]["id"])
    deltas = [(d["index"], d["delta"]) for name, d in got if name == "content_block_delta"]
    assert deltas == [
        (0, {"type": "thinking_delta", "thinking": "2+2"}),
        (0, {"type": "thinking_delta", "thinking": "=4"}),
        (0, {"type": "signature_delta", "signature": thinking_signature("2+2=4")}),
        (1, {"type": "text_delta", "text": "4"}),
        (2, {"type": "input_json_delta", "partial_json": '{"city":"Paris"}'}),
    ]
    stops = [d["index"] for name, d in got if name == "content_block_stop"]
    assert stops == [0, 1, 2]
    assert got[-2][1] == {
        "type": "message_delta",
        "delta": {"stop_reason": "tool_use", "stop_sequence": None},
        "usage": {"output_tokens": 3, "input_tokens": 7, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0},
    }


@pytest.mark.parametrize(
    ("first", "input_tokens"),
    [
        (RoleStart(prompt_tokens=7), 7),  # known before the reply: in message_start, as Anthropic sends it
        (RoleStart(), 0),  # not known yet (an OpenAI upstream): only message_delta has it
        (ContentDelta("a"), 0),
        (RoleStart(prompt_tokens=7, cached_tokens=5), 2),  # a known cache read counted apart, as at the end
    ],
)
def test_message_start_usage(first: Event, input_tokens: int) -> None:
    got = frames([first, ContentDelta("b"), Finish(usage=USAGE)])
    cached = first.cached_tokens if isinstance(first, RoleStart) else None
    assert got[0][1]["message"]["usage"] == {
        "input_tokens": input_tokens, "output_tokens": 0, "cache_creation_input_tokens": 0, "cache_read_input_tokens": cached or 0,
    }  # fmt: skip
    assert got[-2][1]["usage"]["input_tokens"] == 7  # message_delta repeats the count


def test_upstream_signature_passes_through_once() -> None:
    got = frames([ThinkingDelta("x"), ThinkingDelta("", signature="up-sig"), ContentDelta("y"), FINISH])
    signatures = [d["delta"]["signature"] for n, d in got if n == "content_block_delta" and d["delta"]["type"] == "signature_delta"]
    assert signatures == ["up-sig"]


def test_fragment_without_a_name_waits_for_it() -> None:
    got = frames([
        ToolCallFragment(index=0, id="call_1", arguments='{"a"'),
        ToolCallFragment(index=0, name="f", arguments=": 1}"),
        FINISH,
    ])  # fmt: skip
    start = next(d for n, d in got if n == "content_block_start")["content_block"]
    assert start["name"] == "f"
    partial = "".join(d["delta"]["partial_json"] for n, d in got if n == "content_block_delta")
    assert json.loads(partial) == {"a": 1}


@pytest.mark.parametrize(("finish", "reason", "sequence"), [
    (Finish(reason="length"), "max_tokens", None),
    (Finish(stop_sequence="###"), "stop_sequence", "###"),
    (Finish(reason="load"), "end_turn", None),
])  # fmt: skip
def test_stop_reasons(finish: Finish, reason: str, sequence: str | None) -> None:
    delta = frames([ContentDelta("a"), finish])[-2][1]["delta"]
    assert delta == {"stop_reason": reason, "stop_sequence": sequence}


def test_error_frame_body() -> None:
    got = frames([ContentDelta("a"), ErrorEvent("queue full", status=503)])
    assert got[-1] == ("error", {"type": "error", "error": {"type": "overloaded_error", "message": "queue full"}})


def test_stream_and_whole_reply_agree() -> None:
    """The non-streaming body is the aggregate of the same events."""
    events: list[Event] = [RoleStart(), ThinkingDelta("t"), ContentDelta("a"), ContentDelta("b"), ToolCallDone(WEATHER), Finish(usage=USAGE)]
    builder = ResultBuilder()
    for event in events:
        builder.add(event)
    whole = body(builder.result())
    streamed = frames(events)
    text = "".join(d["delta"].get("text", "") for n, d in streamed if n == "content_block_delta")
    assert [b["type"] for b in whole["content"]] == ["thinking", "text", "tool_use"]
    assert whole["content"][1]["text"] == text == "ab"
    assert whole["stop_reason"] == streamed[-2][1]["delta"]["stop_reason"] == "tool_use"
