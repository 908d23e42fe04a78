"""The last playground turn in both dialects: the pure adapters run over what the page
sent and read back. Streams here are written by the gateway's own encoders, as the
page receives them."""

from __future__ import annotations

import json

import msgspec
import pytest

from dragoman.adapters.canonical import ContentDelta, Finish, RoleStart, Usage
from dragoman.adapters.errors import RequestError
from dragoman.adapters import openai
from dragoman.proxy.ui.turn import Turn, canonical_request, decode_turn, read_stream, turn_view, write_stream

MODEL = "smollm2:135m"
EVENTS = [RoleStart(), ContentDelta("Paris"), ContentDelta(" is the capital."), Finish(reason="stop", usage=Usage(31, 6))]
OPENAI_REQUEST = {
    "model": MODEL, "stream": True, "stream_options": {"include_usage": True}, "temperature": 0.2, "max_tokens": 40,
    "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Capital of France?"}],
}
OLLAMA_REQUEST = {
    "model": MODEL, "stream": True, "options": {"temperature": 0.2, "num_predict": 40, "top_k": 20},
    "messages": [{"role": "user", "content": "Capital of France?"}],
}


def sse(events: list) -> str:
    return write_stream("openai", events, MODEL)


def ndjson(events: list) -> str:
    return write_stream("ollama", events, MODEL)


def turn(dialect: str, request: dict, response: str) -> Turn:
    return decode_turn(json.dumps({"dialect": dialect, "request": request, "response": response}).encode())


def view(t: Turn):
    sent = canonical_request(t)
    return turn_view(t, sent, sent)


@pytest.mark.parametrize(("dialect", "request_body", "stream"), [
    ("openai", OPENAI_REQUEST, sse(EVENTS)),
    ("ollama", OLLAMA_REQUEST, ndjson(EVENTS)),
])
def test_a_whole_turn_reads_the_same_in_both_dialects(dialect: str, request_body: dict, stream: str) -> None:
    v = view(turn(dialect, request_body, stream))
    assert (v.reply.content, v.reply.finish_reason, v.reply.usage) == ("Paris is the capital.", "stop", {"prompt_tokens": 31, "completion_tokens": 6})
    assert v.reply.error is None
    sent, other = (v.openai, v.ollama) if dialect == "openai" else (v.ollama, v.openai)
    assert (sent.translated, other.translated) == (False, True)
    assert sent.request == request_body and sent.response == stream
    # The translated side is a valid stream of its dialect carrying the same reply.
    other_dialect = "ollama" if dialect == "openai" else "openai"
    again = read_stream(other_dialect, other.response)
    assert [e for e in again if isinstance(e, ContentDelta)] == [e for e in EVENTS if isinstance(e, ContentDelta)]
    assert isinstance(again[-1], Finish) and again[-1].usage == Usage(31, 6)


def test_translated_requests_carry_the_same_options() -> None:
    v = view(turn("openai", OPENAI_REQUEST, sse(EVENTS)))
    assert v.ollama.request["options"] == {"temperature": 0.2, "num_predict": 40}
    assert [m["role"] for m in v.ollama.request["messages"]] == ["system", "user"]
    assert v.canonical["options"] == {"temperature": 0.2, "num_predict": 40}
    v = view(turn("ollama", OLLAMA_REQUEST, ndjson(EVENTS)))
    assert v.openai.request["temperature"] == 0.2 and v.openai.request["max_tokens"] == 40
    assert v.dropped == ["top_k"]  # OpenAI has no field for it, and the view says so


def test_a_stopped_stream_says_it_was_cut_short() -> None:
    cut = sse(EVENTS[:2]).removesuffix("data: [DONE]\n\n")  # no finish, no [DONE]: the page aborted
    v = view(turn("openai", OPENAI_REQUEST, cut))
    assert v.reply.content == "Paris"
    assert v.reply.finish_reason is None and "ended before" in v.reply.error
    last = v.ollama.response.strip().splitlines()[-1]
    assert "error" in json.loads(last)


def test_an_error_frame_is_translated_as_an_error() -> None:
    stream = sse(EVENTS[:2]).removesuffix("data: [DONE]\n\n") + openai.StreamEncoder(MODEL).error(RequestError("boom")).decode()
    v = view(turn("openai", OPENAI_REQUEST, stream))
    assert v.reply.error.endswith("boom")
    assert json.loads(v.ollama.response.strip().splitlines()[-1])["error"].endswith("boom")


def test_canonical_view_hides_authorization_and_unset_fields() -> None:
    t = turn("openai", OPENAI_REQUEST, sse(EVENTS))
    sent = msgspec.structs.replace(canonical_request(t), authorization="Bearer sk-secret")
    v = turn_view(t, sent, sent)
    text = msgspec.json.encode(v).decode()
    assert "sk-secret" not in text and "authorization" not in v.canonical
    assert "tools" not in v.canonical and "think" not in v.canonical  # unset: left out


@pytest.mark.parametrize(("body", "message"), [
    ({"dialect": "openai", "request": {"model": MODEL, "messages": [{"role": "user", "content": 5}]}},
     "request.messages[0].content: Expected"),
    ({"dialect": "openai", "request": {"messages": []}}, "request: Object missing required field `model`"),
    ({"dialect": "klingon", "request": {}}, "dialect: Invalid enum value 'klingon'"),
    ({"dialect": "ollama", "request": {}, "extra": 1}, "body: Object contains unknown field `extra`"),
    ({"dialect": "ollama", "request": {"model": MODEL, "messages": [{"role": "", "content": "x"}]}}, "messages[0].role"),
])
def test_bad_turns_name_the_field(body: dict, message: str) -> None:
    with pytest.raises(RequestError) as caught:
        canonical_request(decode_turn(json.dumps(body).encode()))
    assert message in caught.value.message


def test_not_json_is_a_request_error() -> None:
    with pytest.raises(RequestError, match="not valid JSON"):
        decode_turn(b"{nope")
