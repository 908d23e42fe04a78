"""OpenAI's ``n``: the count and its bound, one request per choice, and the merged
reply of interleaved choices (dragoman/adapters/openai/choices.py)."""

from __future__ import annotations

import msgspec
import pytest

from dragoman.adapters.aggregate import ChatResult
from dragoman.adapters.canonical import ChatRequest, ContentDelta, Finish, Message, RoleStart, SamplingOptions, TextPart, Usage
from dragoman.adapters.errors import RequestError
from dragoman.adapters.openai.choices import ChoicesEncoder, choice_count, choice_requests, choices_usage
from dragoman.adapters.openai.stream import render_choices


@pytest.mark.parametrize(("n", "count"), [(None, 1), (1, 1), (3, 3), (8, 8)])
def test_choice_count(n: int | None, count: int) -> None:
    assert choice_count(n, 8) == count


@pytest.mark.parametrize(("n", "words"), [(0, "at least 1"), (-2, "at least 1"), (9, "server.limits.max_choices")])
def test_choice_count_refusals_name_n(n: int, words: str) -> None:
    with pytest.raises(RequestError) as info:
        choice_count(n, 8)
    assert info.value.param == "n" and info.value.message.startswith("n: ") and words in info.value.message


def request(seed: int | None) -> ChatRequest:
    return ChatRequest(model="m", messages=[Message("user", [TextPart("hi")])], options=SamplingOptions(seed=seed))


def test_a_seed_gives_each_choice_its_own() -> None:
    assert [r.options.seed for r in choice_requests(request(7), 3)] == [7, 8, 9]
    assert [r.options.seed for r in choice_requests(request(None), 2)] == [None, None]
    assert [r.options.seed for r in choice_requests(request(-1), 2)] == [-1, -1]


def test_usage_counts_the_prompt_once() -> None:
    assert choices_usage([Usage(10, 3, 4), Usage(10, 5, 9)]) == Usage(10, 8, 4)


def frames(raw: bytes) -> list[dict]:
    return [msgspec.json.decode(f[len(b"data: "):]) for f in raw.split(b"\n\n") if f and f != b"data: [DONE]"]


def test_interleaved_choices_are_indexed_under_one_id() -> None:
    encoder = ChoicesEncoder("m", 2, include_usage=True)
    raw = b"".join(
        encoder.encode(i, e)
        for i, e in [(1, RoleStart()), (0, RoleStart()), (1, ContentDelta("b")), (0, ContentDelta("a")),
                     (0, Finish(usage=Usage(4, 1))), (1, Finish(reason="length", usage=Usage(4, 2)))]
    ) + encoder.close()  # fmt: skip
    assert raw.endswith(b"data: [DONE]\n\n")
    chunks = frames(raw)
    assert len({c["id"] for c in chunks}) == 1
    text = {i: "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"] and c["choices"][0]["index"] == i) for i in (0, 1)}
    assert text == {0: "a", 1: "b"}
    finishes = {c["choices"][0]["index"]: c["choices"][0]["finish_reason"] for c in chunks if c["choices"] and c["choices"][0]["finish_reason"]}
    assert finishes == {0: "stop", 1: "length"}
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == 3


def test_no_usage_chunk_when_a_choice_did_not_finish() -> None:
    encoder = ChoicesEncoder("m", 2, include_usage=True)
    encoder.encode(0, Finish(usage=Usage(4, 1)))
    assert encoder.close() == b"data: [DONE]\n\n"


def test_the_whole_reply_has_a_choice_each() -> None:
    body = msgspec.json.decode(render_choices([ChatResult(content="a"), ChatResult(content="b", finish_reason="length")], "m", usage=Usage(4, 3)))
    assert [(c["index"], c["message"]["content"], c["finish_reason"]) for c in body["choices"]] == [(0, "a", "stop"), (1, "b", "length")]
    assert body["usage"]["total_tokens"] == 7
