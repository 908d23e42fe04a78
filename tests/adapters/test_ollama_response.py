"""Canonical events → Ollama NDJSON lines and whole replies (docs/api-mapping.md §1, §4, §5)."""

from __future__ import annotations

import datetime as dt
import re
from typing import Any

import msgspec
import pytest

from dragoman.adapters.aggregate import ResultBuilder
from dragoman.adapters.canonical import (
    ContentDelta,
    ErrorEvent,
    Event,
    Finish,
    Logprobs,
    RoleStart,
    ThinkingDelta,
    Timings,
    TokenLogprob,
    ToolCall,
    ToolCallDone,
    ToolCallFragment,
    TopLogprob,
    Usage,
)
from dragoman.adapters.errors import BackendError, ModelNotFound
from dragoman.adapters.ollama import StreamEncoder, created_at, render_error, render_load_response, render_response

RFC3339_NANO = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{9}Z")
FINISH = Finish(
    reason="stop",
    usage=Usage(prompt_tokens=12, completion_tokens=5),
    timings=Timings(total_ns=900, load_ns=100, prompt_eval_ns=200, eval_ns=500),
)
METRICS = {
    "total_duration": 900,
    "load_duration": 100,
    "prompt_eval_count": 12,
    "prompt_eval_duration": 200,
    "eval_count": 5,
    "eval_duration": 500,
}
EMPTY = {"role": "assistant", "content": ""}


def encode_all(events: list[Event], model: str = "m") -> bytes:
    encoder = StreamEncoder(model)
    return b"".join(encoder.encode(e) for e in events) + encoder.close()


def lines(stream: bytes) -> list[dict[str, Any]]:
    """Each NDJSON line as an object, ``created_at`` checked and dropped."""
    assert stream.endswith(b"\n") or stream == b""
    objects = [msgspec.json.decode(line) for line in stream.split(b"\n")[:-1]]
    for obj in objects:
        if "created_at" in obj:
            assert RFC3339_NANO.fullmatch(obj.pop("created_at"))
    return objects


def chunk(**message: Any) -> dict[str, Any]:
    return {"model": "m", "message": {"role": "assistant", "content": "", **message}, "done": False}


def final(done_reason: str = "stop", **metrics: Any) -> dict[str, Any]:
    return {"model": "m", "message": EMPTY, "done": True, "done_reason": done_reason, **(metrics or METRICS)}


def call(index: int, name: str, arguments: dict[str, Any], call_id: str) -> dict[str, Any]:
    return {"id": call_id, "function": {"index": index, "name": name, "arguments": arguments}}


# -- created_at ----------------------------------------------------------------------------


def test_created_at_is_rfc3339_nanoseconds_and_now() -> None:
    stamp = created_at()
    assert RFC3339_NANO.fullmatch(stamp)
    parsed = dt.datetime.fromisoformat(stamp)  # 3.11 reads the 9 digits (truncating to µs)
    assert parsed.tzinfo is not None and parsed.utcoffset() == dt.timedelta(0)
    assert abs((dt.datetime.now(dt.UTC) - parsed).total_seconds()) < 1


def test_created_at_keeps_nanoseconds() -> None:
    assert created_at(1_795_000_000_123_456_789) == "2026-11-18T11:06:40.123456789Z"


def test_stream_lines_carry_the_current_time() -> None:
    stream = StreamEncoder("m").encode(ContentDelta("x"))
    stamp = msgspec.json.decode(stream)["created_at"]
    assert abs((dt.datetime.now(dt.UTC) - dt.datetime.fromisoformat(stamp)).total_seconds()) < 1


# -- streamed lines ------------------------------------------------------------------------

STREAMS = [
    (
        "content then finish",
        [RoleStart(), ContentDelta("Hel"), ContentDelta("lo"), FINISH],
        [chunk(content="Hel"), chunk(content="lo"), final()],
    ),
    (
        "thinking as message.thinking with empty content",
        [ThinkingDelta("hmm"), ContentDelta("ok"), FINISH],
        [chunk(thinking="hmm"), chunk(content="ok"), final()],
    ),
    (
        "empty deltas write nothing",
        [ContentDelta(""), ThinkingDelta(""), FINISH],
        [final()],
    ),
    (
        "whole calls at once, numbered in order even if the backend leaves index 0",
        [
            ToolCallDone(ToolCall("weather", {"city": "Paris"}, id="call_a")),
            ToolCallDone(ToolCall("time", {"zone": "CET"}, id="call_b")),
            Finish(reason="tool_calls", usage=FINISH.usage, timings=FINISH.timings),
        ],
        [
            chunk(tool_calls=[call(0, "weather", {"city": "Paris"}, "call_a")]),
            chunk(tool_calls=[call(1, "time", {"zone": "CET"}, "call_b")]),
            final("stop"),
        ],
    ),
    (
        "length",
        [ContentDelta("a"), Finish(reason="length", usage=FINISH.usage, timings=FINISH.timings)],
        [chunk(content="a"), final("length")],
    ),
    (
        "logprobs on their own chunk",
        [
            ContentDelta("Hi"),
            Logprobs([TokenLogprob("Hi", -0.1, [72, 105], [TopLogprob("Hi", -0.1), TopLogprob("Yo", -2.5, [89])])]),
            FINISH,
        ],
        [
            chunk(content="Hi"),
            {
                **chunk(),
                "logprobs": [
                    {
                        "token": "Hi",
                        "logprob": -0.1,
                        "bytes": [72, 105],
                        "top_logprobs": [
                            {"token": "Hi", "logprob": -0.1},
                            {"token": "Yo", "logprob": -2.5, "bytes": [89]},
                        ],
                    }
                ],
            },
            final(),
        ],
    ),
    (
        "logprobs on the line of the text they belong to",
        [ContentDelta("Hi", [TokenLogprob("Hi", -0.1, [72, 105])]), ContentDelta("!", [TokenLogprob("!", -0.2)]), FINISH],
        [
            {**chunk(content="Hi"), "logprobs": [{"token": "Hi", "logprob": -0.1, "bytes": [72, 105]}]},
            {**chunk(content="!"), "logprobs": [{"token": "!", "logprob": -0.2}]},
            final(),
        ],
    ),
    (
        "error event is the last line",
        [ContentDelta("a"), ErrorEvent("runner crashed", status=500), ContentDelta("b"), FINISH],
        [chunk(content="a"), {"error": "runner crashed"}],
    ),
]


@pytest.mark.parametrize(("name", "events", "expected"), STREAMS, ids=[c[0] for c in STREAMS])
def test_stream_lines(name: str, events: list[Event], expected: list[dict[str, Any]]) -> None:
    assert lines(encode_all(events)) == expected


def test_two_fragmented_parallel_calls_become_two_whole_lines() -> None:
    fragments = [
        ToolCallFragment(index=0, id="call_a", name="weather"),
        ToolCallFragment(index=0, arguments='{"ci'),
        ToolCallFragment(index=0, arguments='ty": "Paris"}'),
        ToolCallFragment(index=1, id="call_b", name="time", arguments='{"zone"'),
        ToolCallFragment(index=1, arguments=': "CET", "fmt": 24}'),
    ]
    encoder = StreamEncoder("m")
    per_event = [encoder.encode(f) for f in fragments]
    # call 0 goes out as soon as call 1 starts, call 1 at Finish
    assert [bool(b) for b in per_event] == [False, False, False, True, False]
    stream = b"".join(per_event) + encoder.encode(
        Finish(reason="tool_calls", usage=FINISH.usage, timings=FINISH.timings)
    )
    assert lines(stream) == [
        chunk(tool_calls=[call(0, "weather", {"city": "Paris"}, "call_a")]),
        chunk(tool_calls=[call(1, "time", {"zone": "CET", "fmt": 24}, "call_b")]),
        final("stop"),
    ]
    assert list(lines(stream)[1]["message"]["tool_calls"][0]["function"]["arguments"]) == ["zone", "fmt"]


def test_malformed_fragment_arguments_end_with_the_error_line() -> None:
    events = [
        ToolCallFragment(index=0, id="call_a", name="weather", arguments='{"city": '),
        ToolCallFragment(index=1, id="call_b", name="time", arguments="{}"),
        FINISH,
    ]
    objects = lines(encode_all(events))
    assert len(objects) == 1 and set(objects[0]) == {"error"}
    assert "weather" in objects[0]["error"] and "not valid JSON" in objects[0]["error"]


def test_calls_without_id_get_unique_ids() -> None:
    events = [ToolCallDone(ToolCall("f")), ToolCallDone(ToolCall("f")), FINISH]
    ids = [obj["message"]["tool_calls"][0]["id"] for obj in lines(encode_all(events))[:2]]
    assert all(re.fullmatch(r"call_[0-9a-f]{24}", i) for i in ids) and ids[0] != ids[1]


@pytest.mark.parametrize(
    ("reason", "done_reason"),
    [("stop", "stop"), ("tool_calls", "stop"), ("length", "length"), ("load", "load"), ("unload", "unload")],
)
def test_done_reason(reason: Any, done_reason: str) -> None:
    assert lines(StreamEncoder("m").encode(Finish(reason=reason)))[0]["done_reason"] == done_reason


def test_final_line_exact_bytes_shape() -> None:
    line = StreamEncoder("qwen3:0.6b").encode(FINISH)
    assert re.fullmatch(
        rb'\{"model":"qwen3:0.6b","created_at":"[^"]+","message":\{"role":"assistant","content":""\},'
        rb'"done":true,"done_reason":"stop","total_duration":900,"load_duration":100,"prompt_eval_count":12,'
        rb'"prompt_eval_duration":200,"eval_count":5,"eval_duration":500\}\n',
        line,
    )


def test_content_line_exact_bytes_shape() -> None:
    line = StreamEncoder("m").encode(ContentDelta('say "hi"\n'))
    assert re.fullmatch(
        rb'\{"model":"m","created_at":"[^"]+",'
        rb'"message":\{"role":"assistant","content":"say \\"hi\\"\\n"\},"done":false\}\n',
        line,
    )


def test_encoder_error_close_and_media_type() -> None:
    encoder = StreamEncoder("m", include_usage=True)
    assert encoder.media_type == "application/x-ndjson"
    assert encoder.error(BackendError("upstream went away")) == b'{"error":"upstream went away"}\n'
    assert encoder.encode(ContentDelta("late")) == b""  # nothing after the error line
    assert encoder.close() == b""
    assert StreamEncoder("m").encode(RoleStart()) == b""


# -- whole replies -------------------------------------------------------------------------


def result_of(events: list[Event]) -> Any:
    builder = ResultBuilder()
    for event in events:
        builder.add(event)
    return builder.result()


RESPONSES = [
    (
        "content only, no thinking key",
        [ContentDelta("Hello"), FINISH],
        {
            "model": "m",
            "message": {"role": "assistant", "content": "Hello"},
            "done": True,
            "done_reason": "stop",
            **METRICS,
        },
    ),
    (
        "thinking, and tool calls keep content empty (not null)",
        [
            ThinkingDelta("need weather"),
            ToolCallDone(ToolCall("weather", {"city": "Paris"}, id="call_a")),
            ToolCallFragment(index=1, id="call_b", name="time", arguments='{"zone":"CET"}'),
            FINISH,
        ],
        {
            "model": "m",
            "message": {
                "role": "assistant",
                "content": "",
                "thinking": "need weather",
                "tool_calls": [
                    call(0, "weather", {"city": "Paris"}, "call_a"),
                    call(1, "time", {"zone": "CET"}, "call_b"),
                ],
            },
            "done": True,
            "done_reason": "stop",
            **METRICS,
        },
    ),
    (
        "logprobs",
        [ContentDelta("A"), Logprobs([TokenLogprob("A", -0.5)]), FINISH],
        {
            "model": "m",
            "message": {"role": "assistant", "content": "A"},
            "done": True,
            "done_reason": "stop",
            "logprobs": [{"token": "A", "logprob": -0.5}],
            **METRICS,
        },
    ),
]


@pytest.mark.parametrize(("name", "events", "expected"), RESPONSES, ids=[c[0] for c in RESPONSES])
def test_render_response(name: str, events: list[Event], expected: dict[str, Any]) -> None:
    assert lines(render_response(result_of(events), "m") + b"\n") == [expected]


def fold(objects: list[dict[str, Any]]) -> dict[str, Any]:
    """What a client makes of a stream: deltas concatenated, the final line's metadata."""
    message: dict[str, Any] = {"role": "assistant", "content": ""}
    logprobs: list[Any] = []
    for obj in objects:
        assert "error" not in obj
        part = obj["message"]
        message["content"] += part["content"]
        if "thinking" in part:
            message["thinking"] = message.get("thinking", "") + part["thinking"]
        if "tool_calls" in part:
            message.setdefault("tool_calls", []).extend(part["tool_calls"])
        logprobs += obj.get("logprobs", [])
    whole = {**objects[-1], "message": message}
    if logprobs:
        whole["logprobs"] = logprobs
    return whole


EQUIVALENCE = [(name, events) for name, events, _ in STREAMS if not any(isinstance(e, ErrorEvent) for e in events)] + [
    (name, events) for name, events, _ in RESPONSES
]


@pytest.mark.parametrize(("name", "events"), EQUIVALENCE, ids=[c[0] for c in EQUIVALENCE])
def test_stream_folds_to_the_non_streaming_reply(name: str, events: list[Event]) -> None:
    streamed = fold(lines(encode_all(events)))
    rendered = lines(render_response(result_of(events), "m") + b"\n")[0]
    assert streamed == rendered


LOAD = [("load", "load"), ("unload", "unload")]


@pytest.mark.parametrize(("name", "reason"), LOAD, ids=[c[0] for c in LOAD])
def test_render_load_response(name: str, reason: Any) -> None:
    body = render_load_response("llama3.2", reason)
    assert re.fullmatch(
        rb'\{"model":"llama3.2","created_at":"[^"]+","message":\{"role":"assistant","content":""\},"done":true,"done_reason":"'
        + reason.encode()
        + rb'"\}',
        body,
    )


def test_render_error() -> None:
    assert render_error(ModelNotFound("nope")) == b'{"error":"model \'nope\' not found"}'
