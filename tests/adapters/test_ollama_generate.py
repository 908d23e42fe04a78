"""Ollama ``/api/generate``: request in, canonical out; events in, NDJSON out; and the
upstream side, against recorded ``/api/generate`` lines of a real Ollama server."""

from __future__ import annotations

import base64
from typing import Any

import msgspec
import pytest

from dragoman.adapters.aggregate import ChatResult, aggregate
from dragoman.adapters.canonical import (
    CompletionRequest,
    ContentDelta,
    ErrorEvent,
    Event,
    Finish,
    ImagePart,
    Logprobs,
    Message,
    ResponseFormat,
    RoleStart,
    SamplingOptions,
    TextPart,
    ThinkingDelta,
    Timings,
    TokenLogprob,
    TopLogprob,
    Usage,
)
from dragoman.adapters.errors import RequestError, UnsupportedFeature
from dragoman.adapters.ollama import generate, parse_upstream_response, wire
from tests.support.replay import TRANSCRIPTS

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 16
PNG_B64 = base64.b64encode(PNG).decode()


def convert(**fields: Any) -> CompletionRequest:
    return generate.to_canonical(msgspec.convert({"model": "m", "prompt": "hi", **fields}, wire.GenerateRequest))


# -- request in, canonical out -----------------------------------------------------------

TO_CANONICAL: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
    ("templated by default, streaming by default", {}, {"prompt": "hi", "raw": False, "suffix": None, "stream": True}),
    ("raw", {"raw": True}, {"raw": True}),
    ("suffix is fill-in-the-middle", {"prompt": "def f(", "suffix": "    return x"}, {"suffix": "    return x"}),
    ("an empty suffix is no suffix, as in Go", {"suffix": ""}, {"suffix": None}),
    ("suffix with raw (Continue's autocomplete)", {"raw": True, "suffix": "}"}, {"raw": True, "suffix": "}"}),
    ("system", {"system": "Be brief."}, {"system": "Be brief."}),
    ("images", {"images": [PNG_B64]}, {"images": [ImagePart(PNG, "image/png")]}),
    ("options", {"options": {"temperature": 0.2, "num_predict": 5, "stop": "\n", "num_thread": 4}},
     {"options": SamplingOptions(temperature=0.2, num_predict=5, stop=["\n"])}),
    ("format json", {"format": "json"}, {"response_format": ResponseFormat(type="json")}),
    ("think level", {"think": "high"}, {"think": True, "think_level": "high"}),
    ("keep_alive duration", {"keep_alive": "5m"}, {"keep_alive": 300.0}),
    ("logprobs", {"logprobs": True, "top_logprobs": 3}, {"logprobs": True, "top_logprobs": 3}),
    ("context prepends a templated prompt, and a templated reply gives it back", {"context": [1, 2, 3]},
     {"context": [1, 2, 3], "return_context": True}),
    ("raw mode has no token memory, as in Ollama", {"raw": True, "context": [1, 2, 3]},
     {"context": None, "return_context": False}),
    ("an empty context is none", {"context": []}, {"context": None}),
    ("stream false", {"stream": False}, {"stream": False}),
]  # fmt: skip


@pytest.mark.parametrize(("name", "fields", "expected"), TO_CANONICAL, ids=[c[0] for c in TO_CANONICAL])
def test_to_canonical(name: str, fields: dict[str, Any], expected: dict[str, Any]) -> None:
    request = convert(**fields)
    for key, value in expected.items():
        assert getattr(request, key) == value, key


REFUSALS = [
    ("a Go template", {"template": "{{ .Prompt }}"}, UnsupportedFeature, "template"),
    ("system in raw mode", {"raw": True, "system": "x"}, RequestError, "system"),
    ("system with a suffix", {"suffix": "x", "system": "y"}, RequestError, "system"),
    ("a bad think value", {"think": "max"}, RequestError, "think"),
    ("a unit-less keep_alive string", {"keep_alive": "10"}, RequestError, "keep_alive"),
    ("a bad image", {"images": ["not base64!"]}, RequestError, "images[0]"),
]  # fmt: skip


@pytest.mark.parametrize(("name", "fields", "error", "param"), REFUSALS, ids=[c[0] for c in REFUSALS])
def test_refusals_name_the_field(name: str, fields: dict[str, Any], error: type, param: str) -> None:
    with pytest.raises(error) as info:
        convert(**fields)
    assert info.value.param == param and info.value.message.startswith(param)


def test_a_templated_prompt_is_the_chat_it_means() -> None:
    chat = convert(system="Be brief.", images=[PNG_B64], options={"temperature": 0.5}).as_chat()
    assert chat.messages == [
        Message(role="system", parts=[TextPart("Be brief.")]),
        Message(role="user", parts=[ImagePart(PNG, "image/png"), TextPart("hi")]),
    ]
    assert chat.options == SamplingOptions(temperature=0.5) and chat.stream


# -- events in, NDJSON out ----------------------------------------------------------------

FINISH = Finish(reason="stop", usage=Usage(7, 3), timings=Timings(total_ns=9, load_ns=1, prompt_eval_ns=2, eval_ns=5))
COUNTS = {"total_duration": 9, "load_duration": 1, "prompt_eval_count": 7, "prompt_eval_duration": 2,
          "eval_count": 3, "eval_duration": 5}  # fmt: skip
LOGPROB = TokenLogprob("Hi", -0.5, [72, 105], [TopLogprob("Hi", -0.5, [72, 105])])
WIRE_LOGPROB = {"token": "Hi", "logprob": -0.5, "bytes": [72, 105], "top_logprobs": [{"token": "Hi", "logprob": -0.5, "bytes": [72, 105]}]}


def line(**fields: Any) -> dict[str, Any]:
    return {"model": "m", "response": "", "done": False, **fields}


STREAMS: list[tuple[str, list[Event], list[dict[str, Any]]]] = [
    ("text then the final object", [RoleStart(), ContentDelta("Hel"), ContentDelta("lo"), FINISH],
     [line(response="Hel"), line(response="lo"), line(done=True, done_reason="stop", **COUNTS)]),
    ("thinking", [ThinkingDelta("hmm"), ContentDelta("ok"), FINISH],
     [line(thinking="hmm"), line(response="ok"), line(done=True, done_reason="stop", **COUNTS)]),
    ("logprobs on the line of their text", [ContentDelta("Hi", [LOGPROB]), FINISH],
     [line(response="Hi", logprobs=[WIRE_LOGPROB]), line(done=True, done_reason="stop", **COUNTS)]),
    ("logprobs without text", [Logprobs([LOGPROB]), FINISH],
     [line(logprobs=[WIRE_LOGPROB]), line(done=True, done_reason="stop", **COUNTS)]),
    ("length", [ContentDelta("a"), Finish(reason="length", usage=FINISH.usage, timings=FINISH.timings)],
     [line(response="a"), line(done=True, done_reason="length", **COUNTS)]),
    ("context on the final line only", [ContentDelta("a"), msgspec.structs.replace(FINISH, context=[5, 6])],
     [line(response="a"), line(done=True, done_reason="stop", context=[5, 6], **COUNTS)]),
    ("an error is the last line", [ContentDelta("a"), ErrorEvent("runner crashed"), ContentDelta("b"), FINISH],
     [line(response="a"), {"error": "runner crashed"}]),
]  # fmt: skip


def encode_all(events: list[Event]) -> bytes:
    encoder = generate.GenerateEncoder("m")
    return b"".join(encoder.encode(e) for e in events) + encoder.close()


@pytest.mark.parametrize(("name", "events", "expected"), STREAMS, ids=[c[0] for c in STREAMS])
def test_stream_lines(name: str, events: list[Event], expected: list[dict[str, Any]]) -> None:
    raw = encode_all(events)
    assert raw.endswith(b"\n") and b"\n\n" not in raw  # NDJSON: one object per line, nothing else
    lines = [msgspec.json.decode(x) for x in raw.splitlines()]
    for decoded in lines:
        decoded.pop("created_at", None)
    assert lines == expected


def test_whole_reply_is_the_aggregate_of_the_stream() -> None:
    events = [RoleStart(), ThinkingDelta("hmm"), ContentDelta("Hi", [LOGPROB]), ContentDelta("!"), FINISH]
    builder_result = ChatResult(content="Hi!", thinking="hmm", logprobs=[LOGPROB], usage=FINISH.usage, timings=FINISH.timings)
    body = msgspec.json.decode(generate.render_response(builder_result, "m"))
    assert set(body) == {"model", "created_at", "response", "thinking", "done", "done_reason", "logprobs", *COUNTS}
    assert (body["response"], body["thinking"], body["done"], body["done_reason"]) == ("Hi!", "hmm", True, "stop")
    assert body["logprobs"] == [WIRE_LOGPROB]
    streamed = [msgspec.json.decode(x) for x in encode_all(events).splitlines()]
    assert "".join(s["response"] for s in streamed) == body["response"]
    assert {k: streamed[-1][k] for k in COUNTS} == {k: body[k] for k in COUNTS}


def test_the_whole_reply_carries_the_context() -> None:
    body = msgspec.json.decode(generate.render_response(ChatResult(content="Hi", context=[1, 2]), "m"))
    assert body["context"] == [1, 2]


def test_load_and_unload_replies() -> None:
    for reason in ("load", "unload"):
        body = msgspec.json.decode(generate.render_load_response("m", reason))  # type: ignore[arg-type]
        assert body == {"model": "m", "created_at": body["created_at"], "response": "", "done": True, "done_reason": reason}


# -- canonical → an upstream Ollama's /api/generate -----------------------------------------

TO_UPSTREAM: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
    ("templated", {}, {"prompt": "hi", "stream": False}),
    ("raw", {"raw": True}, {"prompt": "hi", "raw": True, "stream": False}),
    # Ollama drops a suffix in raw mode: send raw false, so its template frames it.
    ("a suffix goes without raw", {"raw": True, "suffix": "}"}, {"prompt": "hi", "suffix": "}", "stream": False}),
    ("system, images, options, think, keep_alive, logprobs",
     {"system": "s", "images": [ImagePart(PNG)], "options": SamplingOptions(num_predict=4), "think": True,
      "think_level": "low", "keep_alive": 60.0, "logprobs": True, "top_logprobs": 2, "stream": True},
     {"prompt": "hi", "system": "s", "images": [PNG_B64], "options": {"num_predict": 4}, "think": "low",
      "keep_alive": 60, "logprobs": True, "top_logprobs": 2, "stream": True}),
]  # fmt: skip


@pytest.mark.parametrize(("name", "fields", "expected"), TO_UPSTREAM, ids=[c[0] for c in TO_UPSTREAM])
def test_to_upstream(name: str, fields: dict[str, Any], expected: dict[str, Any]) -> None:
    request = CompletionRequest(model="client-name", prompt="hi", **fields)
    assert msgspec.json.decode(generate.to_upstream(request, "upstream-name")) == {"model": "upstream-name", **expected}


# -- an upstream Ollama's /api/generate lines → events (recorded shapes) ---------------------


def decode_transcript(name: str) -> list[Event]:
    decoder = generate.UpstreamGenerateDecoder()
    events = [e for raw in (TRANSCRIPTS / name).read_bytes().splitlines() for e in decoder.feed(raw)]
    return events + decoder.finish()


def test_recorded_raw_stream() -> None:
    events = decode_transcript("ollama/generate_raw.ndjson")
    assert events[0] == RoleStart() and isinstance(events[-1], Finish)
    assert "".join(e.text for e in events if isinstance(e, ContentDelta)) == "a + b\n"
    assert events[-1].usage == Usage(17, 4) and events[-1].timings.total_ns == 98765432


def test_recorded_stream_with_thinking_logprobs_and_context() -> None:
    events = decode_transcript("ollama/generate_text.ndjson")
    assert [e.text for e in events if isinstance(e, ThinkingDelta)] == ["Capital", " of France."]
    deltas = [e for e in events if isinstance(e, ContentDelta)]
    assert [(d.text, [t.token for t in d.logprobs or []]) for d in deltas] == [("Paris", ["Paris"]), (".", ["."])]
    assert deltas[0].logprobs[0].top_logprobs[1] == TopLogprob("The", -4.5, [84, 104, 101])  # type: ignore[index]
    context = [151644, 872, 198, 3838, 374, 279, 6722, 315, 9625, 30, 151645, 198, 151644, 77091, 198, 59604, 13]
    assert events[-1] == Finish(
        reason="length", usage=Usage(14, 6), timings=Timings(187654321, 23456789, 34567890, 76543210), context=context
    )


async def test_recorded_whole_reply_equals_the_recorded_stream() -> None:
    whole = parse_upstream_response((TRANSCRIPTS / "ollama/generate_text.json").read_bytes(), generate.UpstreamGenerateDecoder())

    async def events(items: list[Event]) -> Any:
        for item in items:
            yield item

    streamed, parsed = await aggregate(events(decode_transcript("ollama/generate_text.ndjson"))), await aggregate(events(whole))
    assert (parsed.content, parsed.thinking, parsed.logprobs, parsed.usage, parsed.context) == (
        streamed.content, streamed.thinking, streamed.logprobs, streamed.usage, streamed.context)  # fmt: skip
    assert parsed.context is not None and len(parsed.context) == 17


def test_an_upstream_error_line() -> None:
    events = parse_upstream_response((TRANSCRIPTS / "ollama/generate_no_insert.json").read_bytes(), generate.UpstreamGenerateDecoder())
    assert events == [ErrorEvent("registry.ollama.ai/library/qwen3:0.6b does not support insert", status=500)]
