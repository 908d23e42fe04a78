"""OpenAI ``/v1/completions``: request in, canonical out; events in, SSE out (legacy
logprobs, one choice per prompt); and the upstream side against recorded vLLM replies."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest

from dragoman.adapters.aggregate import ChatResult
from dragoman.adapters.canonical import (
    CompletionRequest,
    ContentDelta,
    ErrorEvent,
    Event,
    Finish,
    ImagePart,
    Logprobs,
    ResponseFormat,
    RoleStart,
    SamplingOptions,
    TokenLogprob,
    TopLogprob,
    Usage,
)
from dragoman.adapters.errors import RequestError, UnsupportedFeature
from dragoman.adapters.openai import UpstreamStreamDecoder, completion_to_upstream, completions, parse_upstream_response
from dragoman.adapters.openai.completion_wire import CompletionRequest as WireRequest
from tests.support.replay import TRANSCRIPTS


def convert(**fields: Any) -> list[CompletionRequest]:
    return completions.to_canonical(msgspec.convert({"model": "m", "prompt": "hi", **fields}, WireRequest))


# -- request in, canonical out -----------------------------------------------------------

TO_CANONICAL: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
    ("a prompt is raw, 16 tokens by default, not streamed",
     {}, {"prompt": "hi", "raw": True, "suffix": None, "stream": False, "options": SamplingOptions(num_predict=16)}),
    ("suffix", {"suffix": "}"}, {"suffix": "}"}),
    ("sampling", {"max_tokens": 5, "temperature": 0.1, "top_p": 0.9, "seed": 3, "stop": "\n", "presence_penalty": 0.5,
                  "frequency_penalty": 0.25, "top_k": 4, "min_p": 0.1, "repeat_penalty": 1.1},
     {"options": SamplingOptions(temperature=0.1, top_p=0.9, top_k=4, min_p=0.1, repeat_penalty=1.1,
                                 presence_penalty=0.5, frequency_penalty=0.25, seed=3, num_predict=5, stop=["\n"])}),
    ("logprobs 0 is the chosen token's only", {"logprobs": 0}, {"logprobs": True, "top_logprobs": 0}),
    ("logprobs 3", {"logprobs": 3}, {"logprobs": True, "top_logprobs": 3}),
    ("no logprobs", {}, {"logprobs": False, "top_logprobs": 0}),
    ("keep_alive extension", {"keep_alive": "1m"}, {"keep_alive": 60.0}),
    ("stream", {"stream": True}, {"stream": True}),
]  # fmt: skip


@pytest.mark.parametrize(("name", "fields", "expected"), TO_CANONICAL, ids=[c[0] for c in TO_CANONICAL])
def test_to_canonical(name: str, fields: dict[str, Any], expected: dict[str, Any]) -> None:
    [request] = convert(**fields)
    for key, value in expected.items():
        assert getattr(request, key) == value, key


def test_a_list_of_prompts_is_one_request_each() -> None:
    requests = convert(prompt=["a", "b", "c"], max_tokens=2)
    assert [r.prompt for r in requests] == ["a", "b", "c"]
    assert {r.options.num_predict for r in requests} == {2}


REFUSALS = [
    ("n > 1", {"n": 2}, UnsupportedFeature, "n"),
    ("best_of > 1", {"best_of": 3}, UnsupportedFeature, "best_of"),
    ("logit_bias out of range", {"logit_bias": {"50256": 300}}, RequestError, "logit_bias"),
    ("echo with logprobs", {"echo": True, "logprobs": 1}, UnsupportedFeature, "echo"),
    ("token-id prompt", {"prompt": [1, 2, 3]}, UnsupportedFeature, "prompt[0]"),
    ("token-id prompts", {"prompt": [[1, 2], [3]]}, UnsupportedFeature, "prompt[0]"),
    ("empty list", {"prompt": []}, RequestError, "prompt"),
    ("empty prompt", {"prompt": ""}, RequestError, "prompt"),
    ("an empty one among others", {"prompt": ["a", ""]}, RequestError, "prompt[1]"),
]  # fmt: skip


@pytest.mark.parametrize(("name", "fields", "error", "param"), REFUSALS, ids=[c[0] for c in REFUSALS])
def test_refusals_name_the_field(name: str, fields: dict[str, Any], error: type, param: str) -> None:
    with pytest.raises(error) as info:
        convert(**fields)
    assert info.value.param == param and info.value.message.startswith(param)


def test_logprobs_beyond_20_are_refused_by_decoding() -> None:
    with pytest.raises(msgspec.ValidationError, match="logprobs"):
        convert(logprobs=21)


# -- events in, SSE out --------------------------------------------------------------------

FINISH = Finish(reason="stop", usage=Usage(5, 2))
PARIS = TokenLogprob(" Paris", -0.25, None, [TopLogprob(" Paris", -0.25), TopLogprob(" the", -2.0)])
DOT = TokenLogprob(".", float("-inf"))


def frames(raw: bytes) -> list[Any]:
    assert raw.endswith(b"data: [DONE]\n\n")
    events = raw.split(b"\n\n")[:-1]
    assert all(e.startswith(b"data: ") for e in events)
    return [json.loads(e[6:]) if e != b"data: [DONE]" else "[DONE]" for e in events]


def stream_of(choices: list[list[Event]], **options: Any) -> list[Any]:
    stream = completions.CompletionStream("m", **options)
    raw = b""
    for index, events in enumerate(choices):
        encoder = stream.choice(index)
        raw += b"".join(encoder.encode(e) for e in events) + encoder.close()
    return frames(raw + stream.close())


def test_stream_chunks_share_id_and_created_and_end_with_done() -> None:
    chunks = stream_of([[RoleStart(), ContentDelta("Hel"), ContentDelta("lo"), FINISH]], include_usage=True)
    *body, usage, done = chunks
    assert done == "[DONE]"
    assert len({c["id"] for c in body + [usage]}) == 1 and body[0]["id"].startswith("cmpl-")
    assert {c["object"] for c in body} == {"text_completion"} and len({c["created"] for c in body}) == 1
    assert [c["choices"] for c in body] == [
        [{"index": 0, "text": "Hel", "logprobs": None, "finish_reason": None}],
        [{"index": 0, "text": "lo", "logprobs": None, "finish_reason": None}],
        [{"index": 0, "text": "", "logprobs": None, "finish_reason": "stop"}],
    ]
    assert all("usage" not in c for c in body)
    assert usage["choices"] == [] and usage["usage"] == {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7}


def test_legacy_logprobs_on_the_chunk_of_their_text_with_running_offsets() -> None:
    chunks = stream_of([[ContentDelta(" Paris", [PARIS]), ContentDelta(".", [DOT]), FINISH]], top_logprobs=2)
    assert [c["choices"][0]["logprobs"] for c in chunks[:2]] == [
        {"tokens": [" Paris"], "token_logprobs": [-0.25], "top_logprobs": [{" Paris": -0.25, " the": -2.0}], "text_offset": [0]},
        # a ruled-out token's -inf is OpenAI's stand-in, never a null
        {"tokens": ["."], "token_logprobs": [-9999.0], "top_logprobs": [{}], "text_offset": [6]},
    ]


def test_logprobs_0_send_no_alternatives() -> None:
    chunks = stream_of([[ContentDelta(" Paris", [PARIS]), Logprobs([DOT]), FINISH]], top_logprobs=0)
    assert [c["choices"][0]["logprobs"]["top_logprobs"] for c in chunks[:2]] == [None, None]
    assert chunks[1]["choices"][0]["text"] == ""


def test_one_choice_per_prompt_in_turn_with_usage_summed() -> None:
    chunks = stream_of([[ContentDelta("a"), FINISH], [ContentDelta("b"), Finish(reason="length", usage=Usage(3, 1))]],
                       include_usage=True)  # fmt: skip
    texts = [(c["choices"][0]["index"], c["choices"][0]["text"], c["choices"][0]["finish_reason"]) for c in chunks[:4]]
    assert texts == [(0, "a", None), (0, "", "stop"), (1, "b", None), (1, "", "length")]
    assert chunks[4]["usage"] == {"prompt_tokens": 8, "completion_tokens": 3, "total_tokens": 11}


def test_echo_sends_the_prompt_first() -> None:
    stream = completions.CompletionStream("m")
    encoder = stream.choice(0, "Once upon")
    raw = b"".join(encoder.encode(e) for e in [RoleStart(), ContentDelta(" a time"), FINISH]) + stream.close()
    assert [c["choices"][0]["text"] for c in frames(raw)[:-1]] == ["Once upon", " a time", ""]


def test_an_error_ends_the_stream_with_an_error_event_and_done() -> None:
    stream = completions.CompletionStream("m", include_usage=True)
    encoder = stream.choice(0)
    raw = encoder.encode(ContentDelta("a")) + encoder.encode(ErrorEvent("worker died", status=502)) + stream.close()
    chunks = frames(raw)
    assert chunks[1] == {"error": {"message": "worker died", "type": "api_error", "param": None, "code": None}}
    assert chunks[2:] == ["[DONE]"] and stream.failed  # no usage chunk after a failure


def test_whole_reply_is_the_aggregate_of_the_stream() -> None:
    results = [ChatResult(content=" Paris.", logprobs=[PARIS, DOT], usage=Usage(5, 2)),
               ChatResult(content="x", finish_reason="length", usage=Usage(1, 1))]  # fmt: skip
    body = json.loads(completions.render_response(results, "m", echoes=["", "Q:"], top_logprobs=1))
    assert body["object"] == "text_completion" and body["id"].startswith("cmpl-")
    assert [(c["index"], c["text"], c["finish_reason"]) for c in body["choices"]] == [(0, " Paris.", "stop"), (1, "Q:x", "length")]
    assert body["choices"][0]["logprobs"]["text_offset"] == [0, 6]
    assert body["usage"] == {"prompt_tokens": 6, "completion_tokens": 3, "total_tokens": 9}
    streamed = stream_of([[ContentDelta(" Paris", [PARIS]), ContentDelta(".", [DOT]), FINISH]], top_logprobs=1)
    assert "".join(c["choices"][0]["text"] for c in streamed[:-1]) == body["choices"][0]["text"]
    joined = [t for c in streamed[:-1] for t in (c["choices"][0]["logprobs"] or {}).get("tokens", [])]
    assert joined == body["choices"][0]["logprobs"]["tokens"]


# -- canonical → an upstream's /v1/completions --------------------------------------------


def upstream(**fields: Any) -> dict[str, Any]:
    body, _ = completion_to_upstream(CompletionRequest(model="c", prompt="p", raw=True, **fields), "u", extra_options=True)
    return msgspec.json.decode(body)


TO_UPSTREAM: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
    ("no limit is null, not the endpoint's 16", {}, {"model": "u", "prompt": "p", "max_tokens": None, "stream": False}),
    ("suffix, sampling, logprobs, stream", {"suffix": "}", "options": SamplingOptions(num_predict=8, temperature=0.0, top_k=5),
     "logprobs": True, "top_logprobs": 2, "stream": True},
     {"model": "u", "prompt": "p", "suffix": "}", "temperature": 0.0, "max_tokens": 8, "top_k": 5, "logprobs": 2,
      "stream": True, "stream_options": {"include_usage": True}}),
    ("a format", {"response_format": ResponseFormat(type="json")},
     {"model": "u", "prompt": "p", "max_tokens": None, "response_format": {"type": "json_object"}, "stream": False}),
]  # fmt: skip


@pytest.mark.parametrize(("name", "fields", "expected"), TO_UPSTREAM, ids=[c[0] for c in TO_UPSTREAM])
def test_to_upstream(name: str, fields: dict[str, Any], expected: dict[str, Any]) -> None:
    assert upstream(**fields) == expected


def test_images_cannot_go_to_a_completions_endpoint() -> None:
    with pytest.raises(UnsupportedFeature) as info:
        upstream(images=[ImagePart(b"\x89PNG")])
    assert info.value.param == "images"


# -- recorded vLLM /v1/completions replies → events ----------------------------------------


def decode_transcript(name: str) -> list[Event]:
    decoder = UpstreamStreamDecoder()
    events = [e for raw in (TRANSCRIPTS / name).read_bytes().splitlines() for e in decoder.feed(raw)]
    return events + decoder.finish()


def test_recorded_completion_stream() -> None:
    events = decode_transcript("openai/vllm_completion.sse")
    assert events[0] == RoleStart()
    assert "".join(e.text for e in events if isinstance(e, ContentDelta)) == "a + b\n"
    assert events[-1] == Finish(reason="stop", usage=Usage(17, 4))


def test_recorded_legacy_logprobs_ride_on_their_text() -> None:
    events = decode_transcript("openai/vllm_completion_logprobs.sse")
    deltas = [e for e in events if isinstance(e, ContentDelta)]
    assert deltas == [
        ContentDelta(" Paris", [TokenLogprob(" Paris", -0.3125, None, [TopLogprob(" Paris", -0.3125), TopLogprob(" the", -1.875)])]),
        ContentDelta(".", [TokenLogprob(".", -0.5, None, [TopLogprob(".", -0.5), TopLogprob(",", -1.25)])]),
    ]
    assert events[-1] == Finish(reason="length", usage=Usage(7, 2))


@pytest.mark.parametrize("name", ["vllm_completion", "vllm_completion_logprobs"])
def test_recorded_whole_reply_has_the_events_of_the_stream(name: str) -> None:
    whole = parse_upstream_response((TRANSCRIPTS / f"openai/{name}.json").read_bytes())
    streamed = decode_transcript(f"openai/{name}.sse")

    def text_and_tokens(events: list[Event]) -> tuple[str, list[TokenLogprob]]:
        deltas = [e for e in events if isinstance(e, ContentDelta)]
        return "".join(d.text for d in deltas), [t for d in deltas for t in d.logprobs or []]

    assert text_and_tokens(whole) == text_and_tokens(streamed)
    assert whole[-1] == streamed[-1]
